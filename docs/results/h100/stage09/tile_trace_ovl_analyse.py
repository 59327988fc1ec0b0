import numpy as np, sys, glob
for f in sorted(glob.glob(sys.argv[1]+'/tr_*.bin')):
    a=np.fromfile(f,dtype=np.uint64).astype(np.int64)
    ck=a[:132*4].reshape(132,4); tr=a[132*4:].reshape(132,2,32,48)
    ok=(ck[:,2]>ck[:,0])
    ghz=np.median((ck[ok,3]-ck[ok,1])/(ck[ok,2]-ck[ok,0]))
    print(f"== {f}: clock {ghz:.3f} GHz")
    for wg in (0,1):
        rows=[]
        for c in range(132):
            for n in range(30):
                r=tr[c,wg,n]; r2=tr[c,wg,n+1]
                if r[2]==0 or r2[2]==0 or r[47]==0: continue
                B=int(r[1]); T=(r2[2]-r[2])/ghz/1e3
                tops=[r[10+b] for b in range(1,min(B,38)) if r[10+b]>0]
                per=np.diff(tops)/ghz/1e3 if len(tops)>1 else []
                rows.append(dict(B=B,T=T,s0=(r[3]-r[2])/ghz/1e3,sm0=(r[4]-r[3])/ghz/1e3,loop=(r[5]-r[4])/ghz/1e3,
                    q=(r[6]-r[5])/ghz/1e3,kv=(r[7]-r[6])/ghz/1e3,turn=(r[8]-r[7])/ghz/1e3,pv=(r[9]-r[8])/ghz/1e3,
                    epi=(r[47]-r[9])/ghz/1e3,gap=(r2[2]-r[47])/ghz/1e3,per=np.median(per) if len(per) else np.nan))
        if not rows: continue
        per=np.nanmedian([x['per'] for x in rows])
        m=lambda k: np.mean([x[k] for x in rows])
        Bm=np.mean([x['B'] for x in rows]); Tm=m('T')
        print(f" wg{wg}: tiles {len(rows)} mean blocks {Bm:.2f} tile {Tm:.2f} us, steady block {per:.3f} us, overhead {Tm-Bm*per:.2f} us = {(Tm-Bm*per)/per:.2f} blocks")
        print(f"   S0 wait {m('s0'):.3f} softmax0 {m('sm0'):.3f} | loop/(B-1) {np.mean([x['loop']/(x['B']-1) for x in rows if x['B']>1]):.3f} | Q wait {m('q'):.3f} skip+V+K wait {m('kv'):.3f} turn {m('turn'):.3f} PV {m('pv'):.3f} epilogue {m('epi'):.3f} gap {m('gap'):.3f}")
