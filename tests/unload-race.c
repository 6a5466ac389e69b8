/* gmblock tests: a preloaded shim that holds the gmblock plugin's ring
 * teardown on an nbdkit connection thread until nbdkit has unloaded
 * the plugin, for test-unload-ring.  Its io_uring_queue_exit, called on
 * any thread but the main one, waits until no object named
 * nbdkit-gmblock-plugin.so is mapped, or 3 s, then does the real work
 * and returns to its caller: into unmapped code if the plugin went.
 * The main thread's exit waits 300 ms, so the process is not gone
 * before that return.  And the plugin's unload must not delete its
 * thread key first (glibc then skips the destructor): the first
 * pthread_key_delete waits, 3 s at most, until a ring is ending.  Logs
 * "unload-race: ..." lines on stderr.
 * SPDX-License-Identifier: BSD-3-Clause
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct io_uring;

static volatile int ring_ending;

static int
seen (struct dl_phdr_info *info, size_t size, void *found)
{
  (void) size;
  if (info->dlpi_name && strstr (info->dlpi_name, "nbdkit-gmblock-plugin.so"))
    *(int *) found = 1;
  return 0;
}

static int
plugin_mapped (void)
{
  int found = 0;

  dl_iterate_phdr (seen, &found);
  return found;
}

static void
late_exit (void)
{
  usleep (300000);
}

void
io_uring_queue_exit (struct io_uring *ring)
{
  void (*real) (struct io_uring *) = dlsym (RTLD_NEXT, "io_uring_queue_exit");

  if (gettid () != getpid ()) {
    time_t end = time (NULL) + 3;

    atexit (late_exit);
    __atomic_store_n (&ring_ending, 1, __ATOMIC_SEQ_CST);
    fprintf (stderr, "unload-race: a ring ends on thread %d\n", gettid ());
    while (plugin_mapped () && time (NULL) < end)
      usleep (1000);
    fprintf (stderr, "unload-race: the plugin is %s\n",
             plugin_mapped () ? "still loaded" : "unloaded: returning into it");
  }
  real (ring);
}

int
pthread_key_delete (pthread_key_t key)
{
  int (*real) (pthread_key_t) = dlsym (RTLD_NEXT, "pthread_key_delete");
  static int first = 1;

  if (first) {
    time_t end = time (NULL) + 3;

    first = 0;
    while (!__atomic_load_n (&ring_ending, __ATOMIC_SEQ_CST) &&
           time (NULL) < end)
      usleep (1000);
  }
  return real (key);
}
