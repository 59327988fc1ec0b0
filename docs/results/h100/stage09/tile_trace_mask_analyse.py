# The analysis of tile_trace_mask.patch's records (also those of tile_trace_pf.txt and tile_trace_dec.txt):
# tile_trace_ovl_analyse.py's, with the probes that patch added (10: after the diagonal's mask; 46, 45: the
# wait before the last turn split into the next tile's numbers, the last V and the next first K).
# --staging (tile_trace_diag.patch's records, tile_trace_diag.txt): one probe more, 44, after the wait for the
# last tile's O staging to have been read, before the first softmax ("staging read"); the loop's probes end at
# block 33 there, since 44 is taken.
# --epilogue (tile_trace_epi.patch's records, tile_trace_epi.txt; implies --staging): records of 52 probes, two more
# inside write_output_wide: 48 after the wait for the staging's last read, 49 after the staging's stores and L; the
# epilogue (9 -> 47) split into "wait" (9 -> 48: v-bar's loads issued, the wait), "stores" (48 -> 49) and "TMA" (49 -> 47).
# Usage: python3 tile_trace_mask_analyse.py DIR [--staging | --epilogue] (the tr_*.bin files the patched program wrote).
import numpy as np, sys, glob
epilogue = "--epilogue" in sys.argv[2:]
staging = "--staging" in sys.argv[2:] or epilogue
R = 52 if epilogue else 48
for f in sorted(glob.glob(sys.argv[1]+'/tr_*.bin')):
    a=np.fromfile(f,dtype=np.uint64).astype(np.int64)
    ck=a[:132*4].reshape(132,4); tr=a[132*4:].reshape(132,2,32,R)
    ok=(ck[:,2]>ck[:,0])
    ghz=np.median((ck[ok,3]-ck[ok,1])/(ck[ok,2]-ck[ok,0]))
    print(f"== {f}: clock {ghz:.3f} GHz")
    us=lambda x: x/ghz/1e3
    for wg in (0,1):
        rows=[]
        for c in range(132):
            for n in range(30):
                r=tr[c,wg,n]; r2=tr[c,wg,n+1]
                if r[2]==0 or r2[2]==0 or r[47]==0: continue
                B=int(r[1]); T=us(r2[2]-r[2])
                tops=[r[10+b] for b in range(1,min(B,34 if staging else 37)) if r[10+b]>0]
                per=np.diff(tops) if len(tops)>1 else []
                sm0_from = 44 if staging else 10  # the first softmax's start
                rows.append(dict(B=B,T=T,s0=us(r[3]-r[2]),mask=us(r[10]-r[3]),bw=us(r[44]-r[10]),sm0=us(r[4]-r[sm0_from]),
                    first=us((r[11] if B>1 else r[5])-r[4]),
                    loop=us(r[5]-r[4]),q=us(r[6]-r[5]),kv=us(r[7]-r[6]),tilenext=us(r[46]-r[6]),vw=us(r[45]-r[46]),kw=us(r[7]-r[45]),turn=us(r[8]-r[7]),pv=us(r[9]-r[8]),
                    epi=us(r[47]-r[9]),ew=us(r[48]-r[9]) if epilogue else 0,es=us(r[49]-r[48]) if epilogue else 0,
                    et=us(r[47]-r[49]) if epilogue else 0,gap=us(r2[2]-r[47]),per=us(np.median(per)) if len(per) else np.nan,
                    lastblk=us(r[5]-tops[-1]) if len(tops) else np.nan))
        if not rows: continue
        per=np.nanmedian([x['per'] for x in rows])
        m=lambda k: np.nanmean([x[k] for x in rows])
        Bm=np.mean([x['B'] for x in rows]); Tm=m('T')
        print(f" wg{wg}: tiles {len(rows)} mean blocks {Bm:.2f} tile {Tm:.2f} us, steady block {per:.3f} us, overhead {Tm-Bm*per:.2f} us = {(Tm-Bm*per)/per:.2f} blocks")
        bw = f" staging read {m('bw'):.3f}" if staging else ""
        kv = "" if staging else f" V+K wait {m('kv'):.3f}"
        print(f"   S0 wait {m('s0'):.3f} mask {m('mask'):.3f}{bw} softmax0 {m('sm0'):.3f} | top of block 1 {m('first'):.3f} | last block {m('lastblk'):.3f} | Q wait {m('q'):.3f}{kv} [tile_of {m('tilenext'):.3f} V {m('vw'):.3f} K {m('kw'):.3f}] turn {m('turn'):.3f} PV {m('pv'):.3f} epilogue {m('epi'):.3f} gap {m('gap'):.3f}")
        if epilogue:
            print(f"   epilogue: wait {m('ew'):.3f} stores {m('es'):.3f} TMA {m('et'):.3f}")
