/* Unit test: common/nbdkitargs (is nbdkit read-only, are its filters
 * all gmblock's, does it restrict clients, from its argv). */
#include <stdio.h>
#include <string.h>

#include "nbdkitargs.h"
#include "unit.h"

/* Split a command line at spaces ('_' stands for a space inside one
 * argument) and parse it. */
static struct gm_nbdkit_args
parse (const char *line)
{
  char buf[512], *argv[64], *save, *w;
  struct gm_nbdkit_args a;
  int argc = 0;

  snprintf (buf, sizeof buf, "%s", line);
  for (w = strtok_r (buf, " ", &save); w; w = strtok_r (NULL, " ", &save)) {
    for (char *c = w; *c; c++)
      if (*c == '_')
        *c = ' ';
    argv[argc++] = w;
  }
  gm_nbdkit_args_parse (argc, argv, &a);
  return a;
}

static bool ro (const char *line) { return parse (line).readonly; }
static bool gm_plugin (const char *line) { return parse (line).gmblock_plugin; }
static bool gm_only (const char *line)
{
  return parse (line).gmblock_filters_only;
}
/* What restricts TCP clients, or "" for nothing. */
static const char *
access_of (const char *line)
{
  const char *a = parse (line).access;
  return a ? a : "";
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
  struct gm_nbdkit_args self;
  gm_nbdkit_self (&self);
  CHECK (!self.readonly);

  /* Only gmblock's filters (they keep the export's size), by name or
   * by the path ./nbdkit passes. */
  CHECK (gm_only ("nbdkit gmblock file=x"));
  CHECK (gm_only ("nbdkit --filter=gmblock-readahead --filter=gmblock-cache gmblock file=x"));
  CHECK (gm_only ("nbdkit --filter gmblock-stripe -r gmblock file=x"));
  CHECK (gm_only ("nbdkit --filter=/src/filters/cache/nbdkit-gmblock-cache-filter.so gmblock file=x"));
  CHECK (gm_only ("nbdkit --filter=nbdkit-gmblock-rdma-filter.so gmblock file=x"));
  CHECK (gm_only ("nbdkit --fil=gmblock-cache gmblock file=x"));   /* abbreviated */
  /* A parameter named filter is no filter. */
  CHECK (gm_only ("nbdkit gmblock file=x filter=truncate"));
  /* Any other filter may change the size. */
  CHECK (!gm_only ("nbdkit --filter=truncate --filter=gmblock-cache gmblock file=x"));
  CHECK (!gm_only ("nbdkit --filter=gmblock-cache --filter offset gmblock file=x"));
  CHECK (!gm_only ("nbdkit --filter=/usr/lib/nbdkit/filters/nbdkit-partition-filter.so gmblock file=x"));
  CHECK (!gm_only ("nbdkit --filter=gmblock-cache.so gmblock file=x"));
  CHECK (!gm_only ("nbdkit --filter=/x/nbdkit-gmblock-filter.so gmblock file=x"));
  CHECK (!gm_only ("nbdkit --filter=/x/nbdkit-gmblock-cache-plugin.so gmblock file=x"));
  /* Read-only and filters from one command line. */
  CHECK (ro ("nbdkit -r --filter=truncate gmblock file=x"));
  CHECK (gm_only ("nbdkit -r --filter=gmblock-cache gmblock file=x"));
  /* This process: no filter at all, no access control. */
  CHECK (self.gmblock_filters_only);
  CHECK (self.access == NULL);

  /* The plugin is gmblock's (its .open needs no client), by name or by
   * path, wherever the options stand. */
  CHECK (gm_plugin ("nbdkit gmblock file=x"));
  CHECK (gm_plugin ("nbdkit gmblock-rdma server=h"));
  CHECK (gm_plugin ("nbdkit -f --filter=gmblock-cache -U /tmp/s gmblock file=x"));
  CHECK (gm_plugin ("nbdkit --filter gmblock-readahead -D x=1 gmblock-rdma server=h -r"));
  CHECK (gm_plugin ("nbdkit /src/plugins/gmblock/nbdkit-gmblock-plugin.so file=x"));
  CHECK (gm_plugin ("nbdkit nbdkit-gmblock-rdma-plugin.so server=h"));
  CHECK (!gm_plugin ("nbdkit file dir=/x"));
  CHECK (gm_plugin ("nbdkit -f -- gmblock file=x"));
  CHECK (gm_plugin ("nbdkit --filter=gmblock-cache -- ./plugins/gmblock/nbdkit-gmblock-plugin.so file=x -r"));
  CHECK (!gm_plugin ("nbdkit -- file file=gmblock"));
  CHECK (!gm_plugin ("nbdkit --filter gmblock file dir=/x"));   /* --filter's argument */
  CHECK (!gm_plugin ("nbdkit -fr -U- file dir=/x --filter=gmblock-cache"));
  CHECK (!gm_plugin ("nbdkit --filter=gmblock-cache file file=gmblock"));
  CHECK (!gm_plugin ("nbdkit -U gmblock file file=x"));     /* -U's argument */
  CHECK (!gm_plugin ("nbdkit gmblockx file=x"));
  CHECK (!gm_plugin ("nbdkit gmblock.so file=x"));
  CHECK (!gm_plugin ("nbdkit /x/nbdkit-gmblock-cache-filter.so file=x"));
  CHECK (!gm_plugin ("nbdkit /x/nbdkit-gmblockx-plugin.so file=x"));
  CHECK (!gm_plugin ("nbdkit --filter=gmblock-cache"));     /* no plugin */
  CHECK (!self.gmblock_plugin);

  /* nbdkit's access controls, which a listener of a filter's own
   * (gmblock-rdma) bypasses. */
  CHECK (strcmp (access_of ("nbdkit --tls=require gmblock file=x"), "--tls=require") == 0);
  CHECK (strcmp (access_of ("nbdkit --tls require gmblock file=x"), "--tls=require") == 0);
  CHECK (strcmp (access_of ("nbdkit --tls=REQUIRED gmblock file=x"), "--tls=require") == 0);
  CHECK (strcmp (access_of ("nbdkit --tls=force gmblock file=x"), "--tls=require") == 0);
  CHECK (strcmp (access_of ("nbdkit gmblock file=x --tls=require"), "--tls=require") == 0);
  CHECK (strcmp (access_of ("nbdkit --filter=ip gmblock file=x allow=1.2.3.4"), "--filter=ip") == 0);
  CHECK (strcmp (access_of ("nbdkit --filter /usr/lib/nbdkit/filters/nbdkit-ip-filter.so gmblock file=x"), "--filter=ip") == 0);
  CHECK (strcmp (access_of ("nbdkit --filter=ip --tls=require gmblock file=x"), "--filter=ip") == 0);
  /* TLS offered, not required; an option's argument; a parameter. */
  CHECK (strcmp (access_of ("nbdkit --tls=on gmblock file=x"), "") == 0);
  CHECK (strcmp (access_of ("nbdkit --tls=off gmblock file=x"), "") == 0);
  CHECK (strcmp (access_of ("nbdkit -D --tls=require gmblock file=x"), "") == 0);
  CHECK (strcmp (access_of ("nbdkit gmblock file=x tls=require filter=ip"), "") == 0);
  CHECK (strcmp (access_of ("nbdkit --filter=ipx --filter=/x/ip.so gmblock file=x"), "") == 0);
  UNIT_DONE ();
}
