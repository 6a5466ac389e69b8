#!/usr/bin/python3
"""gmblock: the nbdkit example command lines of the docs, for
tests/test-doc-examples.sh.

    tests/doc-examples.py FILE...

An example is a line of an example block (Markdown: an indented or
fenced code block; pod: a verbatim paragraph) at the block's own
indentation that starts with `nbdkit `, `./nbdkit `, `sudo nbdkit ` or
any of them after a `$ ` prompt.  Lines ending in a backslash go on on
the next line; a synopsis (optional parts in [brackets]) also goes on
on every deeper-indented line after it.  A `$ ` example followed by
lines that are not commands shows what nbdkit answers: its output,
which the test expects to find in nbdkit's.

Printed, one line each, fields separated by tabs:

    example FILE LINE KIND ARGS TEXT EXPECTED
        KIND: example; synopsis (brackets expanded: an optional part
        is given, and of alternatives a|b the first); or unslashed (an
        example, not a synopsis, that goes on on a deeper-indented line
        with no backslash before it: broken when pasted); ARGS: the words
        after nbdkit, shell-quoted; TEXT: the command as the doc shows it
        (continuations joined); EXPECTED: the output shown ("" if none)
    skipped FILE LINE REASON TEXT
        a line of an example block that starts with nbdkit but is no
        command line (part of an example's output, a column listing),
        or an nbdkit command in inline code of the prose (Markdown
        `...`, pod C<...>): listed, not run (many are fragments:
        "nbdkit -v", "gmblock ...")
    count FILE N
        examples found in FILE

It exits 1 if a file in which a plain search finds indented lines
starting with nbdkit yields no example at all: this parser is broken.
"""
import re
import shlex
import sys

START = re.compile(r'^(?:\$ )?(?:sudo )?(?:\./)?nbdkit(?= |$)')
# An nbdkit command in inline code: nbdkit and an option or a plugin.
INLINE = re.compile(r'^(?:\$ )?(?:sudo )?(?:\./)?nbdkit +[-\w]')
# A plain search, to catch a parser that finds nothing.
ROUGH = re.compile(r'^\s+(?:\$ )?(?:sudo )?(?:\./)?nbdkit ')


def indent(line):
    return len(line) - len(line.lstrip(' '))


def markdown_blocks(lines):
    """Code blocks as lists of (line number, text)."""
    blocks, cur = [], None
    list_indent = 0             # content column of the enclosing list item
    fence = None
    prev_blank = True
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip('\n').expandtabs()
        s = line.strip()
        if fence is not None:
            if s.startswith(fence):
                blocks.append(cur)
                cur, fence = None, None
            else:
                cur.append((n, line))
            continue
        if s.startswith('```') or s.startswith('~~~'):
            if cur:
                blocks.append(cur)
            fence, cur = s[:3], []
            continue
        if not s:
            if cur is not None:
                cur.append((n, ''))
            prev_blank = True
            continue
        ind = indent(line)
        if cur is not None and ind >= list_indent + 4:
            cur.append((n, line))
            prev_blank = False
            continue
        if cur is not None:
            blocks.append(cur)
            cur = None
        if prev_blank and ind >= list_indent + 4:
            cur = [(n, line)]
            prev_blank = False
            continue
        m = re.match(r'^(\s*)(?:[-*+]|\d+\.)\s+', line)
        if m:
            list_indent = len(m.group(0))
        elif ind == 0:
            list_indent = 0
        prev_blank = False
    if cur:
        blocks.append(cur)
    return blocks


def pod_blocks(lines):
    """Verbatim paragraphs as lists of (line number, text)."""
    blocks, para = [], []
    skip = False
    for n, raw in enumerate(lines + ['\n'], 1):
        line = raw.rstrip('\n').expandtabs()
        if line.startswith('=begin'):
            skip = True
        elif line.startswith('=end'):
            skip = False
        if line.strip():
            para.append((n, line))
            continue
        if para and not skip and para[0][1][:1] == ' ':
            blocks.append(para)
        para = []
    return blocks


def inline_commands(path, lines, blocks):
    """Inline code of the prose that starts as an example does, as
    (line number, text): code blocks and their fences left out."""
    inblock = {n for block in blocks for n, _ in block}
    prose = []
    for n, raw in enumerate(lines, 1):
        s = raw.strip()
        if n in inblock or s.startswith('```') or s.startswith('~~~') or \
                (path.endswith('.pod') and s[:1] == '='):
            prose.append('')
        else:
            prose.append(raw.rstrip('\n'))
    text = '\n'.join(prose)
    span = r'C<([^<>]+)>' if path.endswith('.pod') else r'`([^`]+)`'
    found = []
    for m in re.finditer(span, text):
        if '\n\n' in m.group(1):
            continue                    # not one paragraph: no span
        code = ' '.join(m.group(1).split())
        if INLINE.match(code):
            found.append((text.count('\n', 0, m.start()) + 1, code))
    return found


def expand(words):
    """Brackets of a synopsis: an optional part that is a whole word or
    begins one is given (the brackets dropped), one inside a word
    (HOST[:PORT]) is left out; of alternatives a|b the first."""
    text = ' '.join(words)
    out = []
    # Pass 1: drop the optional parts inside a word.
    i = 0
    res = ''
    while i < len(text):
        c = text[i]
        if c == '[' and res and res[-1] not in ' [':
            d = 0
            while i < len(text):
                d += {'[': 1, ']': -1}.get(text[i], 0)
                i += 1
                if d == 0:
                    break
            continue
        res += c
        i += 1
    res = res.replace('[', '').replace(']', '')
    for w in res.split():
        if '=' in w:
            k, v = w.split('=', 1)
            w = k + '=' + v.split('|')[0]
        out.append(w)
    return out


def parse(path):
    lines = open(path, encoding='utf-8').readlines()
    blocks = pod_blocks(lines) if path.endswith('.pod') else markdown_blocks(lines)
    found = []
    for block in blocks:
        text = [(n, l) for n, l in block if l.strip()]
        if not text:
            continue
        base = min(indent(l) for _, l in text)
        i = 0
        while i < len(block):
            n, line = block[i]
            body = line[base:] if indent(line) >= base else line.strip()
            i += 1
            if not START.match(line.strip()):
                continue
            if indent(line) > base:
                print('skipped\t%s\t%d\tpart of the output shown above it\t%s'
                      % (path, n, line.strip()))
                continue
            if re.match(r'^(?:\$ )?(?:sudo )?(?:\./)?nbdkit {2,}', body):
                print('skipped\t%s\t%d\ta column listing, not a command\t%s'
                      % (path, n, line.strip()))
                continue
            cmd = body.rstrip()
            unslashed = False
            while i < len(block):
                n2, nxt = block[i]
                if cmd.endswith('\\'):
                    cmd = cmd[:-1].rstrip() + ' ' + nxt.strip()
                elif nxt.strip() and indent(nxt) > base:
                    cmd = cmd + ' ' + nxt.strip()
                    unslashed = True
                else:
                    break
                i += 1
            synopsis = '[' in cmd
            prompt = cmd.startswith('$ ')
            expected = []
            if prompt:
                while i < len(block):
                    _, nxt = block[i]
                    if not nxt.strip() or START.match(nxt.strip()) or \
                            nxt.strip().startswith('#'):
                        break
                    expected.append(nxt.strip())
                    i += 1
            words = shlex.split(cmd, comments=True)
            if words and words[0] == '$':
                words = words[1:]
            if words and words[0] == 'sudo':
                words = words[1:]
            words = words[1:]                   # nbdkit
            if words and words[-1] == '&':
                words = words[:-1]
            if synopsis:
                words = expand(words)
            shown = ' '.join(cmd.split())
            kind = 'synopsis' if synopsis else 'example'
            if unslashed and not synopsis:
                kind = 'unslashed'
            print('example\t%s\t%d\t%s\t%s\t%s\t%s'
                  % (path, n, kind,
                     shlex.join(words), shown, ' '.join(expected)))
            found.append(n)
    for n, code in inline_commands(path, lines, blocks):
        print('skipped\t%s\t%d\tinline code in the prose, not run\t%s'
              % (path, n, code))
    return found, any(ROUGH.match(l) for l in lines)


def main():
    broken = False
    for path in sys.argv[1:]:
        found, rough = parse(path)
        print('count\t%s\t%d' % (path, len(found)))
        if rough and not found:
            print('%s: lines start with nbdkit, but no example was found in it: '
                  'tests/doc-examples.py is broken' % path, file=sys.stderr)
            broken = True
    return 1 if broken else 0


if __name__ == '__main__':
    sys.exit(main())
