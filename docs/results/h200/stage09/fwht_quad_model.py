# A model of fwht_quad (quantize.cu) in numpy float32: a row across 4 lanes, value 8j + o of lane p being element
# 32j + 8p + o; strides 1, 2, 4 inside a lane, 8 and 16 by "shuffles" between the four, 32 and 64 inside again.
# It checks that the result is bitwise the CPU's fwht (fp8.cpp) on random rows at d = 64 and 128.
import numpy as np
rng = np.random.default_rng(1)
def fwht_cpu(x):
    x = x.copy(); d = len(x); h = 1
    while h < d:
        for i in range(0, d, 2*h):
            for j in range(i, i+h):
                a, b = x[j], x[j+h]; x[j] = np.float32(a+b); x[j+h] = np.float32(a-b)
        h *= 2
    return x
def fwht_quad(row, D, signs):
    kVals = D//4; E = D//32
    lanes = []
    for p in range(4):  # value k = 8j+o is element 32j+8p+o
        v = np.array([row[32*(k//8) + 8*p + k%8] for k in range(kVals)], dtype=np.float32)
        for k in range(kVals):
            c = 32*(k//8) + 8*p + k%8
            if signs[c] < 0: v[k] = -v[k]
        lanes.append(v)
    def inside(bit):
        for v in lanes:
            for k in range(kVals):
                if k & bit == 0:
                    a, b = v[k], v[k+bit]; v[k] = np.float32(a+b); v[k+bit] = np.float32(a-b)
    inside(1); inside(2); inside(4)
    q = 1
    while q < 4:
        new = [v.copy() for v in lanes]
        for p in range(4):
            for k in range(kVals):
                partner = lanes[p ^ q][k]
                new[p][k] = np.float32(lanes[p][k] + partner) if (p & q) == 0 else np.float32(partner - lanes[p][k])
        lanes = new; q *= 2
    bit = 8
    while bit < kVals:
        inside(bit); bit *= 2
    out = np.zeros(D, dtype=np.float32)
    for p in range(4):
        for k in range(kVals): out[32*(k//8) + 8*p + k%8] = lanes[p][k]
    return out
for D in (64, 128):
    for t in range(20):
        row = (rng.standard_normal(D) * (10.0 ** rng.integers(-3, 4, D))).astype(np.float32)
        signs = rng.choice([-1.0, 1.0], D).astype(np.float32)
        ref = fwht_cpu((row * signs).astype(np.float32))
        got = fwht_quad(row, D, signs)
        assert np.array_equal(ref.view(np.uint32), got.view(np.uint32)), (D, t)
print("bitwise equal at d = 64 and 128")
