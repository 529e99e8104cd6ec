#!/usr/bin/python3
"""Runs suricata-verify-style test directories through the real Suricata
and evaluates their checks, as `sluice ips verify` does through Sluice.

The Suricata is the one scripts/suricata-reference.sh unpacked (SURICATA_DIR,
default /tmp/suri), run offline with its stock suricata.yaml; a test whose
name contains "ips" runs inline (`--simulate-ips`), as suricata-verify runs
it. The checks follow suricata-verify: dotted paths with [N] indexes,
`has-key`, `not-has-key`, `count`, `lt`, `gt`, `min-version`/`lt-version`
per test and per filter.

usage: scripts/suricata-check.py ROOT [PREFIX...]
"""
import glob, json, os, re, subprocess, sys, yaml
D = os.environ.get('SURICATA_DIR', '/tmp/suri')
R = D + '/root'
VER = (7, 0, 10)
def ver(s):
    p = [int(re.match(r'\d*', x).group() or 0) for x in str(s).split('.')]
    return tuple((p + [0, 0, 0])[:3])
def get(rec, path):
    cur = rec
    for part in path.split('.'):
        m = re.fullmatch(r'([^\[]*)((?:\[\d+\])*)', part)
        name, idx = m.group(1), re.findall(r'\[(\d+)\]', m.group(2))
        if name:
            if not isinstance(cur, dict) or name not in cur: raise KeyError
            cur = cur[name]
        for i in idx:
            i = int(i)
            if not isinstance(cur, list) or i >= len(cur): raise KeyError
            cur = cur[i]
    return cur
def matches(rec, match):
    for k, v in match.items():
        if k == 'has-key':
            try: get(rec, v)
            except KeyError: return False
            continue
        if k == 'not-has-key':
            try: get(rec, v); return False
            except KeyError: continue
        try: got = get(rec, k)
        except KeyError: return False
        if got != v and str(got) != str(v): return False
    return True
def run(d, out):
    t = yaml.safe_load(open(os.path.join(d, 'test.yaml'))) or {}
    req = t.get('requires') or {}
    if 'min-version' in req and ver(req['min-version']) > VER: return 'skip', 'min-version %s' % req['min-version']
    pcaps = glob.glob(os.path.join(d, '*.pcap'))
    rules = glob.glob(os.path.join(d, '*.rules'))
    os.makedirs(out, exist_ok=True)
    for f in glob.glob(os.path.join(out, '*')): os.remove(f)
    cmd = [D + '/suricata.sh', '-c', R + '/etc/suricata/suricata.yaml', '-k', 'none', '--runmode', 'single',
           '-l', out, '-r', pcaps[0], '--set', 'classification-file=' + R + '/etc/suricata/classification.config',
           '--set', 'reference-config-file=' + R + '/etc/suricata/reference.config',
           '--set', 'threshold-file=/dev/null', '--set', 'default-rule-path=' + d]
    if rules: cmd += ['-S', rules[0]]
    else: cmd += ['-S', '/dev/null']
    if 'ips' in os.path.basename(d): cmd.append('--simulate-ips')
    for a in t.get('args') or []: cmd += a.split()
    p = subprocess.run(cmd, capture_output=True, text=True)
    eve = os.path.join(out, 'eve.json')
    recs = [json.loads(l) for l in open(eve)] if os.path.exists(eve) else []
    fails = []
    for c in t.get('checks') or []:
        f = c.get('filter')
        if not f: continue
        if 'min-version' in f and ver(f['min-version']) > VER: continue
        if 'lt-version' in f and ver(f['lt-version']) <= VER: continue
        n = sum(1 for r in recs if matches(r, f.get('match') or {}))
        ok = True
        if 'count' in f and n != f['count']: ok = False
        if 'lt' in f and not n < f['lt']: ok = False
        if 'gt' in f and not n > f['gt']: ok = False
        if not ok: fails.append('%s: got %d, want %s' % (f.get('comment', f.get('match')), n, f.get('count', f.get('lt', f.get('gt')))))
    if p.returncode != 0 and not recs: fails.append('suricata rc %d: %s' % (p.returncode, p.stderr[-300:]))
    return ('fail', '; '.join(fails)) if fails else ('pass', '')
def main():
    root = sys.argv[1]; pre = sys.argv[2:]
    res = {'pass': 0, 'fail': 0, 'skip': 0}
    for d in sorted(glob.glob(os.path.join(root, '*', 'test.yaml'))):
        d = os.path.dirname(d); name = os.path.basename(d)
        if pre and not any(name.startswith(x) for x in pre): continue
        st, why = run(d, os.path.join(D, 'out', name))
        res[st] += 1
        print('%s %s %s' % (st.upper(), name, why))
    print(res)
    sys.exit(1 if res['fail'] else 0)


if __name__ == '__main__':
    main()
