#!/usr/bin/python3
"""What systemd would run for one instance of a template service, for
tests that run a shipped unit file without a running systemd.

    systemd-exec.py UNIT INSTANCE ETC-ROOT KEY

KEY is ExecStartPre or ExecStart (the unit must have exactly one) or
env.  Prints that command's argv, or the service's environment as
VAR=value, each item followed by a NUL.  EnvironmentFile= paths are
read under ETC-ROOT (so /etc/gmblock/x.conf is ETC-ROOT/etc/gmblock/x.conf).

It follows systemd.service(5) and systemd.exec(5) for what the gmblock
units use, and refuses anything else rather than guess: specifiers %i
and %%; words split with shell-like quotes; Environment= defaults that
EnvironmentFile= overrides; at exec time, a word that is exactly $VAR
becomes the value split at whitespace, ${VAR} is replaced in place and
$$ is a dollar sign.
"""
import re
import shlex
import sys

NAME = r'[A-Za-z_][A-Za-z0-9_]*'


def die(msg):
    sys.exit(f'systemd-exec: {msg}')


def unit_lines(path):
    """(key, value) of the [Service] section, continuations joined."""
    section, out, pending = None, [], ''
    for raw in open(path, encoding='utf-8'):
        line = pending + raw.rstrip('\n')
        if line.endswith('\\'):
            pending = line[:-1] + ' '
            continue
        pending = ''
        s = line.strip()
        if not s or s[0] in '#;':
            continue
        if s.startswith('['):
            section = s
        elif section == '[Service]':
            k, sep, v = s.partition('=')
            if not sep:
                die(f'{path}: not key=value: {s}')
            out.append((k.strip(), v.strip()))
    return out


def specifiers(s, instance):
    def one(m):
        c = m.group(1)
        if c == 'i':
            return instance
        if c == '%':
            return '%'
        die(f'specifier %{c} not handled')
    return re.sub(r'%(.)', one, s)


def env_file(path):
    """systemd's environment file: VAR=value lines, # or ; comments,
    one pair of quotes around a value removed."""
    env = {}
    try:
        f = open(path, encoding='utf-8')
    except OSError as e:
        die(f'EnvironmentFile {path}: {e.strerror}')
    for line in f:
        s = line.strip()
        if not s or s[0] in '#;':
            continue
        k, sep, v = s.partition('=')
        if not sep or not re.fullmatch(NAME, k.strip()):
            die(f'{path}: not VAR=value: {s}')
        v = v.strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in '"\'':
            v = v[1:-1]
        env[k.strip()] = v
    return env


def expand(words, env):
    argv = []
    for w in words:
        m = re.fullmatch(r'\$(' + NAME + ')', w)
        if m:
            argv += env.get(m.group(1), '').split()
            continue
        argv.append(re.sub(r'\$\$|\$\{(' + NAME + r')\}',
                           lambda m: '$' if m.group(0) == '$$'
                           else env.get(m.group(1), ''), w))
    return argv


def main():
    if len(sys.argv) != 5:
        die('usage: systemd-exec.py UNIT INSTANCE ETC-ROOT KEY')
    unit, instance, root, key = sys.argv[1:]
    env, files, cmds = {}, {}, {}
    for k, v in unit_lines(unit):
        v = specifiers(v, instance)
        if k == 'Environment':
            for a in shlex.split(v):
                n, sep, val = a.partition('=')
                if not sep:
                    die(f'Environment={v}: not VAR=value')
                env[n] = val
        elif k == 'EnvironmentFile':
            if v.startswith('-') or not v.startswith('/'):
                die(f'EnvironmentFile={v} not handled')
            files.update(env_file(root + v))
        elif k.startswith('Exec'):
            if v[:1] in '-@+!:':
                die(f'{k}={v}: command prefixes not handled')
            cmds.setdefault(k, []).append(shlex.split(v))
    env.update(files)
    if key == 'env':
        items = [f'{k}={v}' for k, v in env.items()]
    elif len(cmds.get(key, [])) == 1:
        items = expand(cmds[key][0], env)
    else:
        die(f'{unit}: {len(cmds.get(key, []))} {key}= lines, expected 1')
    sys.stdout.write(''.join(i + '\0' for i in items))


main()
