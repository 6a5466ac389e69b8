/* Unit test for filters/cache/policy.c: one connection's requests run
 * in parallel (the gmblock plugin is parallel, so nbdkit calls the
 * filter from several threads for one connection), so the per-connection
 * stream state must be updated under a lock.  Two threads note reads on
 * one connection; the test re-executes itself under valgrind's helgrind,
 * which reports any unsynchronised access (it did before the lock);
 * built with ThreadSanitizer, it runs as it is.
 * The scan detection itself is checked too.
 */
#include <pthread.h>
#include <unistd.h>

#include "../../filters/cache/policy.c"
#include "unit.h"

struct cache_config cfg = { .mode = MODE_ADAPTIVE, .scan_bytes = 1 << 20 };
struct gm_counter cstats[CS_COUNT];

#define PER_THREAD 2000

static struct conn *shared_conn;

static void *
reader (void *arg)
{
  uint64_t base = (uintptr_t) arg << 32;
  bool scan;

  for (int i = 0; i < PER_THREAD; i++)
    policy_note_read (shared_conn, base + (uint64_t) i * 4096, 4096, &scan);
  return NULL;
}

static void
rerun_under_helgrind (char **argv)
{
/* Under TSan the test checks itself (and valgrind cannot run it). */
#if !defined (__SANITIZE_ADDRESS__) && !defined (__SANITIZE_THREAD__)
  if (getenv ("GM_UNDER_HELGRIND") == NULL &&
      access ("/usr/bin/valgrind", X_OK) == 0) {
    setenv ("GM_UNDER_HELGRIND", "1", 1);
    execl ("/usr/bin/valgrind", "valgrind", "-q", "--tool=helgrind",
           "--error-exitcode=1", argv[0], (char *) NULL);
    perror ("execl valgrind");
    exit (1);
  }
#endif
}

int
main (int argc, char **argv)
{
  struct conn c;
  pthread_t t[2];
  bool scan = false;

  rerun_under_helgrind (argv);

  /* A sequential run becomes a scan at scan_bytes; a random read not. */
  conn_init (&c);
  for (uint64_t off = 0; off < (1 << 20) - 65536; off += 65536) {
    policy_note_read (&c, off, 65536, &scan);
    CHECK (!scan);
  }
  policy_note_read (&c, (1 << 20) - 65536, 65536, &scan);
  CHECK (scan);
  policy_note_read (&c, 1ULL << 40, 4096, &scan);
  CHECK (!scan);
  conn_destroy (&c);

  /* Two threads, one connection, interleaved streams. */
  shared_conn = calloc (1, sizeof *shared_conn);
  CHECK (shared_conn != NULL);
  conn_init (shared_conn);
  for (uintptr_t k = 0; k < 2; k++)
    CHECK (pthread_create (&t[k], NULL, reader, (void *) (k + 1)) == 0);
  for (int k = 0; k < 2; k++)
    pthread_join (t[k], NULL);
  conn_destroy (shared_conn);
  free (shared_conn);
  UNIT_DONE ();
}
