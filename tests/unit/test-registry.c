/* Unit tests for common/registry.c. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "registry.h"
#include "unit.h"

int
main (void)
{
  char *v, stale[64];

  CHECK (gm_registry_lookup ("TEST_KEY") == NULL);
  CHECK (gm_registry_publish ("TEST_KEY", "/dev/md0") == 0);
  v = gm_registry_lookup ("TEST_KEY");
  CHECK (v != NULL && strcmp (v, "/dev/md0") == 0);
  free (v);
  /* Values may hold ':' (only the first one ends the pid). */
  CHECK (gm_registry_publish ("TEST_KEY", "/a:b") == 0);
  v = gm_registry_lookup ("TEST_KEY");
  CHECK (v != NULL && strcmp (v, "/a:b") == 0);
  free (v);
  CHECK (strcmp (getenv ("GMBLOCK_REG_TEST_KEY") + strcspn (getenv ("GMBLOCK_REG_TEST_KEY"), ":"), ":/a:b") == 0);

  /* Inherited from another process: ignored. */
  snprintf (stale, sizeof stale, "%ld:/dev/sda", (long) getpid () + 1);
  setenv ("GMBLOCK_REG_TEST_KEY", stale, 1);
  CHECK (gm_registry_lookup ("TEST_KEY") == NULL);
  setenv ("GMBLOCK_REG_TEST_KEY", "garbage", 1);
  CHECK (gm_registry_lookup ("TEST_KEY") == NULL);

  /* Keys are letters, digits and '_'. */
  errno = 0;
  CHECK (gm_registry_publish ("BAD=KEY", "x") == -1 && errno == EINVAL);
  CHECK (gm_registry_publish ("", "x") == -1 && errno == EINVAL);
  CHECK (gm_registry_lookup ("BAD KEY") == NULL);
  UNIT_DONE ();
}
