"""A stand-in for PyTorch, for the peer scripts' tests on a machine without it or a GPU (numpy).

    import fake_torch          # installs torch, torch.nn.functional, torch.nn.attention, torch.profiler
    import torch_attention     # now runs on it

Tensors are numpy arrays (views stay views: a transposed tensor keeps its strides). SDPA computes
attention in float64 and rounds to the inputs' dtype; autograd.grad computes its exact backward.
Every SDPA call, backward and flush (a float32 sum) appends "GPU work" to a timeline that
torch.profiler exports as Kineto does (a Chrome trace); CUDA events read a clock that the work
advances. What SDPA was given is kept in `calls` (backend, and the strides of Q), so that a test can
see the layout a backend got. A backend named in `refuse` raises RuntimeError, as SDPA does for a
backend that does not take a shape.
"""
import contextlib
import enum
import json
import sys
import types

import numpy as np

timeline = []  # Chrome-trace events of the "GPU work"
clock = [0.0]  # microseconds
calls = []  # (backend, Q's strides in elements) of every SDPA call outside the float64 reference
refuse = set()
_backend = [None]


def _work(name, us, cat="kernel"):
    clock[0] += 3.0
    timeline.append({"ph": "X", "cat": cat, "name": name, "ts": clock[0], "dur": us})
    clock[0] += us


class Tensor:
    def __init__(self, a, inputs=None):
        self.a = a
        self._inputs = inputs  # (q, k, v, causal) of an SDPA output

    def __array__(self, dtype=None, copy=None):
        return self.a.astype(dtype) if dtype is not None else self.a

    def mul_(self, x):
        self.a *= x
        return self

    def sub_(self, x):
        self.a -= x
        return self

    def to(self, dtype):
        return Tensor(self.a.astype(dtype))

    def transpose(self, i, j):
        return Tensor(np.swapaxes(self.a, i, j))

    def __getitem__(self, index):
        return Tensor(self.a[index])

    def double(self):
        return Tensor(self.a.astype(np.float64))

    def requires_grad_(self, flag=True):
        return self

    def detach(self):
        return self

    def contiguous(self):
        return Tensor(np.ascontiguousarray(self.a))

    def element_size(self):
        return self.a.itemsize

    def numel(self):
        return self.a.size

    @property
    def dtype(self):
        return self.a.dtype

    @property
    def shape(self):
        return self.a.shape

    def sum(self):
        if self.a.dtype == np.float32 and self.a.ndim == 1:
            _work("void at::native::reduce_kernel<512, 1>(ReduceOp<float, sum>)", 40.0)
        return Tensor(np.asarray(self.a.sum()))


def _attention(q, k, v, causal):
    """O, and P for the backward, in float64."""
    q, k, v = (np.asarray(t.a, dtype=np.float64) for t in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((s.shape[-2], n), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ v, p


def scaled_dot_product_attention(q, k, v, is_causal=False):
    backend = _backend[0]
    if backend in refuse:
        raise RuntimeError(f"No available kernel for {backend}.\nmore")
    if q.dtype != np.float64:
        calls.append((backend, tuple(s // q.a.itemsize for s in q.a.strides)))
        _work(f"void pytorch_{backend}::fwd_kernel<T>(Params)", 100.0)
    o, _ = _attention(q, k, v, is_causal)
    return Tensor(o.astype(q.dtype), inputs=(q, k, v, is_causal))


def _grad(o, inputs, grad_output, retain_graph=False):
    q, k, v, causal = o._inputs
    _, p = _attention(q, k, v, causal)
    q64, k64, v64, do = (np.asarray(t.a, dtype=np.float64) for t in (q, k, v, grad_output))
    scale = 1.0 / np.sqrt(q64.shape[-1])
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v64, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    dq = ds @ k64 * scale
    dk = np.swapaxes(ds, -1, -2) @ q64 * scale
    if q.dtype != np.float64:
        _work("memset", 1.0, cat="gpu_memset")
        _work(f"void pytorch_{_backend[0]}::bwd_kernel<T>(Params)", 250.0)
    return tuple(Tensor(g.astype(q.dtype)) for g in (dq, dk, dv))


class _Generator:
    def __init__(self, device=None):
        self.rng = np.random.default_rng(0)

    def manual_seed(self, seed):
        self.rng = np.random.default_rng(seed)
        return self


class _Event:
    def __init__(self, enable_timing=False):
        self.t = 0.0

    def record(self):
        self.t = clock[0]

    def elapsed_time(self, other):
        return (other.t - self.t) / 1e3


class OutOfMemoryError(RuntimeError):
    pass


class _Flush(Tensor):
    def __init__(self):
        super().__init__(np.zeros(1, np.float32))


class SDPBackend(enum.Enum):
    MATH = "math"
    EFFICIENT_ATTENTION = "efficient"
    FLASH_ATTENTION = "flash"
    CUDNN_ATTENTION = "cudnn"


@contextlib.contextmanager
def sdpa_kernel(backend):
    _backend[0] = backend.value
    try:
        yield
    finally:
        _backend[0] = None


class _Profile:
    def __init__(self, activities=None):
        pass

    def __enter__(self):
        self.first = len(timeline)
        return self

    def __exit__(self, *exc):
        self.events = timeline[self.first:]
        return False

    def export_chrome_trace(self, path):
        with open(path, "w") as f:
            json.dump({"traceEvents": self.events}, f)


torch = types.ModuleType("torch")
torch.float32, torch.float16, torch.bfloat16, torch.float64 = np.float32, np.float16, np.float32, np.float64
torch.Tensor = Tensor
torch.device = lambda name: name
torch.Generator = _Generator
torch.rand = lambda *shape, device=None, generator=None: Tensor(generator.rng.random(shape, dtype=np.float32))
torch.zeros = lambda n, dtype=None, device=None: _Flush()
torch.autograd = types.SimpleNamespace(grad=_grad)
torch.backends = types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=True)),
                                       cudnn=types.SimpleNamespace(allow_tf32=True))
torch.cuda = types.SimpleNamespace(
    is_available=lambda: True, get_device_name=lambda i=0: "Fake GPU",
    get_device_properties=lambda i: types.SimpleNamespace(L2_cache_size=1 << 20),
    Event=_Event, synchronize=lambda: None, empty_cache=lambda: None, reset_peak_memory_stats=lambda: None,
    memory_allocated=lambda: 0, max_memory_allocated=lambda: 1000, OutOfMemoryError=OutOfMemoryError)
functional = types.ModuleType("torch.nn.functional")
functional.scaled_dot_product_attention = scaled_dot_product_attention
attention = types.ModuleType("torch.nn.attention")
attention.SDPBackend, attention.sdpa_kernel = SDPBackend, sdpa_kernel
nn = types.ModuleType("torch.nn")
nn.functional, nn.attention = functional, attention
torch.nn = nn
profiler = types.ModuleType("torch.profiler")
profiler.ProfilerActivity = types.SimpleNamespace(CUDA="cuda", CPU="cpu")
profiler.profile = _Profile
torch.profiler = profiler
sys.modules.update({"torch": torch, "torch.nn": nn, "torch.nn.functional": functional,
                    "torch.nn.attention": attention, "torch.profiler": profiler})
