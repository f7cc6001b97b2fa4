#!/usr/bin/env python3
"""Fails if the files of a module tree import each other in a cycle.

usage: check-import-cycles.py CRATE_SRC [MODULE]
  e.g. check-import-cycles.py crates/gpu/src            (the whole GPU runtime)
       check-import-cycles.py crates/storage/src download

Builds the file-level graph of `use` paths and `crate::`/`super::`/`self::` paths (test modules
and comments left out), following `pub use` re-exports to the file that defines the item, and
prints each strongly connected component of more than one file with the paths that close it.
Cargo keeps crates acyclic; this keeps the files inside the lowest layers in an order too (the
kernel registry at the bottom of the GPU runtime)."""
import re,os,sys,collections
root=sys.argv[1]; sub=sys.argv[2] if len(sys.argv)>2 else ''
files={}
for dp,dn,fn in os.walk(os.path.join(root,sub)):
    for f in fn:
        if f.endswith('.rs'):
            p=os.path.join(dp,f); rel=os.path.relpath(p,root)[:-3]
            parts=rel.split('/')
            if parts[-1]=='mod' or parts[-1]=='lib': parts=parts[:-1]
            files['::'.join(parts)]=p
def clean(s):
    """The text without comments and without an inline test module (by convention the last
    item of a file, so everything from it on is dropped)."""
    s=re.sub(r'//[^\n]*','',s)
    s=re.sub(r'#\[cfg\(test\)\]\s*mod tests\s*\{.*',"",s,flags=re.S)
    return s
src={m:clean(open(p).read()) for m,p in files.items()}
def expand(prefix, t):
    """The (path, name) pairs one `use` tree brings in: `a::{b, c::{d as e}}` gives
    (a::b, b) and (a::c::d, e)."""
    t = t.strip()
    group = re.match(r'^(?:([\w:]*?)::)?\{(.*)\}$', t, re.S)
    if group:
        pre = [group.group(1)] if group.group(1) else []
        depth, cur = 0, ''
        for ch in group.group(2) + ',':
            depth += (ch == '{') - (ch == '}')
            if ch == ',' and depth == 0:
                if cur.strip():
                    yield from expand(prefix + pre, cur)
                cur = ''
            else:
                cur += ch
    else:
        name = t.split(' as ')
        yield ('::'.join([x for x in prefix if x] + [name[0].strip()]), name[-1].strip())


def absolute(mod,path):
    """path relative to module mod -> absolute crate path (without crate::)."""
    parts=path.split('::')
    if parts[0]=='crate': return '::'.join(parts[1:])
    base=mod.split('::')
    if parts[0]=='self': return '::'.join(base+parts[1:])
    if parts[0]=='super':
        while parts and parts[0]=='super':
            base=base[:-1]; parts=parts[1:]
        return '::'.join(base+parts)
    # bare: child module of mod?
    if '::'.join(base+[parts[0]]) in files: return '::'.join(base+parts)
    return None
# re-exports: module -> name -> absolute path
reexp=collections.defaultdict(dict)
for m,s in src.items():
    for u in re.finditer(r'\bpub(?:\([\w ]+\))?\s+use\s+([^;]+);',s):
        for path,alias in expand([],u.group(1).replace('\n',' ')):
            a=absolute(m,path)
            if a: reexp[m][alias]=a
def resolve(path,seen=0):
    parts=path.split('::')
    for i in range(len(parts),0,-1):
        m='::'.join(parts[:i])
        if m in files:
            if i<len(parts) and parts[i] in reexp[m] and seen<10:
                tgt=reexp[m][parts[i]]
                r=resolve(tgt+('::'+'::'.join(parts[i+1:]) if i+1<len(parts) else ''),seen+1)
                if r: return r
            return m
    return None
edges=collections.defaultdict(set); why=collections.defaultdict(list)
for m,s in src.items():
    s2=re.sub(r'\bpub(?:\([\w ]+\))?\s+use\s+[^;]+;','',s)  # re-exports are not uses
    paths=[]
    for u in re.finditer(r'\buse\s+([^;]+);',s2):
        for path,alias in expand([],u.group(1).replace('\n',' ')):
            paths.append(path)
    for x in re.finditer(r'(?<![\w:])((?:crate|super|self)(?:::\w+)+)',s2):
        paths.append(x.group(1))
    kids=[k.split('::')[-1] for k in files if k.rsplit('::',1)[0]==m and k!=m]
    for k in kids:
        if re.search(r'(?<![\w:])'+k+r'::',s2): paths.append(k)
    for path in paths:
        a=absolute(m,path)
        if not a: continue
        r=resolve(a)
        if r and r!=m:
            edges[m].add(r); why[(m,r)].append(path)
idx={};low={};st=[];on=set();sccs=[];c=[0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
    for w in edges[v]:
        if w not in files: continue
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        comp=[]
        while True:
            w=st.pop();on.discard(w);comp.append(w)
            if w==v:break
        sccs.append(comp)
for v in sorted(files):
    if v not in idx: sc(v)
bad=[c for c in sccs if len(c)>1]
for comp in bad:
    print(len(comp),'files in a cycle:')
    for a in sorted(comp):
        print('  ',a,'->',{x:sorted(set(why[(a,x)]))[:3] for x in sorted(edges[a]) if x in comp})
print(f'{os.path.join(root,sub)}: {len(files)} files, {len(bad)} import cycles')
sys.exit(1 if bad else 0)
