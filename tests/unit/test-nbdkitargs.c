/* Unit test: common/nbdkitargs (is nbdkit read-only, from its argv). */
#include <stdio.h>
#include <string.h>

#include "nbdkitargs.h"
#include "unit.h"

/* Split a command line at spaces ('_' stands for a space inside one
 * argument) and ask. */
static bool
ro (const char *line)
{
  char buf[512], *argv[64], *save, *w;
  int argc = 0;

  snprintf (buf, sizeof buf, "%s", line);
  for (w = strtok_r (buf, " ", &save); w; w = strtok_r (NULL, " ", &save)) {
    for (char *c = w; *c; c++)
      if (*c == '_')
        *c = ' ';
    argv[argc++] = w;
  }
  return gm_nbdkit_args_readonly (argc, argv);
}

int
main (void)
{
  CHECK (ro ("nbdkit -r gmblock file=/dev/md0"));
  CHECK (ro ("nbdkit --readonly gmblock file=/dev/md0"));
  CHECK (ro ("nbdkit --read-only gmblock file=/dev/md0"));
  CHECK (ro ("nbdkit -fr -U /tmp/s gmblock file=x"));
  CHECK (ro ("nbdkit -fvr gmblock file=x"));
  /* After the plugin name: GNU getopt permutes, as nbdkit does. */
  CHECK (ro ("nbdkit --filter=gmblock-rdma gmblock file=x rdma=10.0.0.1 -r"));
  CHECK (ro ("nbdkit --filter gmblock-rdma gmblock -r file=x"));
  CHECK (ro ("nbdkit --reado gmblock file=x"));          /* abbreviated */
  CHECK (ro ("nbdkit --read gmblock file=x"));   /* both long ones: nbdkit too */
  CHECK (ro ("nbdkit -D gmblock.stats=1 -r gmblock file=x"));
  CHECK (!ro ("nbdkit gmblock file=/dev/md0"));
  CHECK (!ro ("nbdkit -f -v -U - gmblock file=x"));
  /* Arguments of options are no options. */
  CHECK (!ro ("nbdkit -U -r gmblock file=x"));
  CHECK (!ro ("nbdkit -D -r gmblock file=x"));
  CHECK (!ro ("nbdkit --run nbdcopy_-r_$uri_out gmblock file=x"));
  CHECK (!ro ("nbdkit --filter=gmblock-rdma gmblock file=-r"));
  CHECK (!ro ("nbdkit -e -r gmblock file=x"));
  CHECK (!ro ("nbdkit gmblock -- -r"));                  /* after --: a parameter */
  /* Unknown options are not -r. */
  CHECK (!ro ("nbdkit --bogus gmblock file=x"));
  /* The state getopt keeps does not leak from one call to the next. */
  CHECK (ro ("nbdkit -r x"));
  CHECK (!ro ("nbdkit x"));
  /* This process: the unit test was not started with -r. */
  CHECK (!gm_nbdkit_readonly ());
  UNIT_DONE ();
}
