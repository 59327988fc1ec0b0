# Analyse the wide rung's per-tile clock64 trace (scratch patch tile_trace.patch): where a tile's time goes.
import sys, numpy as np
for f in sys.argv[1:]:
    a = np.fromfile(f, dtype=np.uint64).astype(np.int64)
    ck = a[:132*4].reshape(132,4); tr = a[132*4:].reshape(132,2,32,400)
    ghz = np.median((ck[:,3]-ck[:,1])/(ck[:,2]-ck[:,0]))
    us = lambda c: c/ghz/1e3
    per=[]; rows=[]; bt=[]
    for sm in range(132):
        for w in range(2):
            for n in range(31):
                r = tr[sm,w,n]; nb = int(r[1])
                if nb <= 2 or r[395]==0: continue
                blk = [r[10+6*b] for b in range(1,min(nb,64))]
                periods = np.diff(blk)
                if len(periods) < 3: continue
                steady = np.median(periods[1:-1]) if len(periods)>3 else np.median(periods)
                nxt = tr[sm,w,n+1,3] if tr[sm,w,n+1,3] else r[395]
                tile = nxt - r[3]
                rows.append(dict(nb=nb, tile=tile, steady=steady, qwait=r[3]-r[2], kwait0=r[5]-r[4], turn0=r[6]-r[5],
                    s0=r[7]-r[6], sm0=r[8]-r[7], first=r[10+6]-r[3], tail=r[395]-r[9], pvlast=r[394]-r[9], epi=r[395]-r[394],
                    gap=tr[sm,w,n+1,2]-r[395] if tr[sm,w,n+1,2] else 0,
                    mid_kwait=np.median([r[10+6*b+1]-r[10+6*b] for b in range(2,min(nb,64)-1)]),
                    mid_turn=np.median([r[10+6*b+2]-r[10+6*b+1] for b in range(2,min(nb,64)-1)]),
                    mid_s=np.median([r[10+6*b+3]-r[10+6*b+2] for b in range(2,min(nb,64)-1)]),
                    mid_sm=np.median([r[10+6*b+4]-r[10+6*b+3] for b in range(2,min(nb,64)-1)]),
                    mid_pv=np.median([r[10+6*b+5]-r[10+6*b+4] for b in range(2,min(nb,64)-1)]),
                    w=w))
                bt.append(periods[:min(len(periods),15)])
    print(f"== {f}: {len(rows)} tile records, clock {ghz:.3f} GHz")
    for w in (0,1):
        R=[x for x in rows if x['w']==w]
        if not R: continue
        m=lambda k: us(np.median([x[k] for x in R]))
        nb=np.median([x['nb'] for x in R])
        print(f" wg{w}: blocks {nb:.0f}  tile {m('tile'):.2f} us  steady block {m('steady'):.3f} us  overhead {m('tile')-nb*m('steady'):.2f} us = {(m('tile')-nb*m('steady'))/m('steady'):.2f} blocks")
        print(f"   start: qwait {m('qwait'):.3f} kwait0 {m('kwait0'):.3f} turn0 {m('turn0'):.3f} S0 {m('s0'):.3f} softmax0 {m('sm0'):.3f} | wait_q->block1 top {m('first'):.3f}")
        print(f"   end: last wait_v->PV done {m('pvlast'):.3f} epilogue {m('epi'):.3f} gap to next loop top {m('gap'):.3f}")
        print(f"   mid block: kwait {m('mid_kwait'):.3f} turn {m('mid_turn'):.3f} S wait {m('mid_s'):.3f} softmax {m('mid_sm'):.3f} PV wait {m('mid_pv'):.3f}")
    L=min(len(x) for x in bt); B=np.array([x[:L] for x in bt])
    print("   period by block index (us):", " ".join(f"{us(v):.2f}" for v in np.median(B,axis=0)))
