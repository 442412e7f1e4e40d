"""A per-stage device audit: every torch op a stage runs must stay on its placed device.

The placement (`placement.py`) puts each stage on a device (the two-GPU default: the VLM
on cuda:0, ASR and TTS on cuda:1), but nothing made the stages' code keep to it: a
device-less `.cuda()`, a `device="cuda"` or a default device set somewhere lands on the
*current* CUDA device (cuda:0), which on one GPU is the right one by luck. The audit is a
torch dispatch mode (`TorchDispatchMode`) that a stage enters in the worker thread that
runs its torch work (dispatch modes are thread-local, so it sees that thread's ops and
no other's). Every op that reaches the dispatcher (aten, and custom ops registered with
torch) is checked, its tensor inputs before it runs (so an op mixing devices is named
before torch's own error) and its outputs after (so an allocation names the device it
made). The first tensor off the stage's device raises
`DeviceAuditError`, e.g. `tts (configured cuda:1): aten::mm on cuda:0`.

What is allowed beside the stage's own device, and why:

- CPU tensors of 0 dims, anywhere: torch itself accepts a CPU scalar tensor as an
  operand beside tensors of any device (`x * torch.tensor(2.0)`); it is a number, not
  data placed on a device.
- On a CUDA stage, host (CPU) tensors: the same thread does host work between its device
  work (tokenizer output before its copy to the device, the token ids the streamer
  decodes, a `.tolist()` of a result), and copies between the host and the stage's
  device are how inputs arrive and outputs leave. So on a CUDA stage the audit guards
  the placement (no other GPU, no meta tensors), not the host/device split;
  `host=False` makes host tensors of 1 or more dims fail too, for hunting host work in
  a region that should have none. On a CPU stage the host *is* the device: any CUDA (or
  meta) tensor fails.

What it catches: a device-less `.cuda()` / `.to("cuda")` or `device="cuda"` on a stage
whose device is not the current one (the output names the device it landed on);
allocations under a default device (`torch.set_default_device`, `with torch.device(...)`)
that is not the stage's; ops mixing the stage's device with another; any CUDA tensor in
a CPU stage; and `torch.cuda.synchronize`, `torch.cuda.Stream.synchronize` (so
`torch.cuda.current_stream(d).synchronize()`) and `torch.cuda.set_device` on a device
that is not the stage's (a device-less synchronize is resolved to the current device;
on a CPU stage any of them fails). Those three are not ops, so no dispatch mode sees
them: when the first audit is entered they are replaced, once and process-wide, by
wrappers that check only in a thread with an audit active and otherwise call the
original at once.

On one GPU the current device is the only one, so a stage placed on cuda:0 cannot show
a reach for "the" GPU: only a stage placed on the CPU can (any CUDA tensor fails there).
The device check therefore places the ASR on the CPU and the VLM and TTS on cuda:0
(`tests/gpu/check_device.py`, `device_audit`); moving another stage to the CPU checks
that one.

What it cannot see:

- work outside the audited thread and region: other threads, the vLLM engine core
  (another process: under `runtime = "vllm"` only the in-process TTS is audited), and
  model loading, which the stages leave unaudited because transformers builds a model on
  the meta device before it materialises the weights (weights that end up on a wrong
  device fail at their first use in an audited request);
- CUDA Graph replays (`graph.replay()` launches recorded kernels without dispatching
  ops; the capture, where it runs inside an audit, is checked op by op), kernels that
  extensions launch without going through the dispatcher (Triton or custom CUDA code
  not registered as torch ops), and `torch.from_numpy` (no op; the ops on its result are
  checked);
- other device calls that are not ops: `torch.cuda.Event.synchronize`, streams made or
  switched to (`torch.cuda.stream(...)`), `with torch.cuda.device(n)` (it calls the C
  function directly; what runs under it is checked), the caching allocator
  (`empty_cache`, memory stats), NCCL; and a `synchronize` imported by name
  (`from torch.cuda import synchronize`) before an audit first ran.

Off by default and free when off: `device_audit(..., enabled=False)` is a
`contextlib.nullcontext()`, imports nothing and patches nothing. Enabled by the
placement's top-level `device_audit = true` (`placement.py`) or by an explicit argument
(`HfAsrEngine(..., device_audit=True)`, the GPU check). This module imports torch only
when an audit is entered, so it imports without the gpu extra.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import TYPE_CHECKING, Any

from backends.base import StageFailed

if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from types import TracebackType

__all__ = ["DeviceAudit", "DeviceAuditError", "active_audit", "device_audit"]


class DeviceAuditError(StageFailed):
    """A stage ran an op (or a CUDA call) on a device other than its configured one."""

    def __init__(self, stage: str, configured: str, op: str, found: str) -> None:
        super().__init__(f"{stage} (configured {configured}): {op} on {found}", stage=stage)
        self.configured = configured
        self.op = op
        self.found = found


_ACTIVE = threading.local()  # `.audits`: this thread's entered audits, innermost last
_PATCH_LOCK = threading.Lock()
_patched_cuda_calls = False


def active_audit() -> DeviceAudit | None:
    """The innermost audit entered in this thread, if any."""
    audits: list[DeviceAudit] = getattr(_ACTIVE, "audits", [])
    return audits[-1] if audits else None


def device_audit(
    stage: str, device: str, *, enabled: bool = True, host: bool | None = None
) -> AbstractContextManager[Any]:
    """The audit of `stage` on `device` ("cpu", "cuda:N"; any torch device in tests) as a
    context manager to enter in the thread that runs the stage's ops; a
    `contextlib.nullcontext()` when not `enabled`. `host`: allow host tensors (None:
    on a non-CPU device, yes; see the module docstring)."""
    if not enabled:
        return contextlib.nullcontext()
    return DeviceAudit(stage, device, host=host)


class DeviceAudit:
    """One entry of one stage's audit (a new one per `with`: a dispatch mode instance
    keeps per-entry state, and a violation is remembered until the exit)."""

    def __init__(self, stage: str, device: str, *, host: bool | None = None) -> None:
        import torch
        from torch.utils._pytree import tree_leaves

        self._tensor_type = torch.Tensor  # looked up once: the check runs for every op
        self._leaves = tree_leaves
        self.stage = stage
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            # "cuda" alone means whatever device is current: the very ambiguity audited
            raise ValueError(f"{stage}: a CUDA stage's device needs an index, got {device!r}")
        self.configured = str(self.device)
        self.host = (self.device.type != "cpu") if host is None else host
        #: the first violation, raised again at the exit if the code under audit caught it
        self.violation: DeviceAuditError | None = None
        self._mode: Any = None

    def __enter__(self) -> DeviceAudit:
        import torch

        _patch_cuda_calls(torch)
        self._mode = _mode_class()(self)
        audits: list[DeviceAudit] = getattr(_ACTIVE, "audits", None) or []
        _ACTIVE.audits = audits
        audits.append(self)
        try:
            self._mode.__enter__()
        except BaseException:
            audits.pop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self._mode.__exit__(exc_type, exc, traceback)
        finally:
            _ACTIVE.audits.pop()
        if exc is None and self.violation is not None:
            # something under the audit caught the error (a library's fallback path): a
            # wrong device must not pass because someone tried the op and moved on
            raise self.violation

    def _fail(self, op: str, found: str) -> DeviceAuditError:
        error = DeviceAuditError(self.stage, self.configured, op, found)
        if self.violation is None:
            self.violation = error
        return error

    def _allowed(self, tensor: Any) -> bool:
        device = tensor.device
        if device == self.device:
            return True
        if device.type == "cpu":
            return self.host or tensor.dim() == 0
        return False

    def check_tensors(self, op: str, tree: Any) -> None:
        """Raise for the first tensor in `tree` (args, kwargs or outputs) off the stage's
        device."""
        for leaf in self._leaves(tree):
            if isinstance(leaf, self._tensor_type) and not self._allowed(leaf):
                raise self._fail(op, str(leaf.device))

    def check_cuda_call(self, call: str, device: Any) -> None:
        """Raise when `call` (a CUDA runtime call, not an op) targets a device other than
        the stage's; `device` as the call takes it (None: the current device)."""
        if self.device.type != "cuda":
            raise self._fail(call, _cuda_name(device, resolve=False))
        found = _cuda_name(device, resolve=True)
        if found != self.configured:
            raise self._fail(call, found)


def _cuda_name(device: Any, *, resolve: bool) -> str:
    """`cuda:N` for a CUDA call's device argument (None, an index, "cuda", "cuda:N", a
    torch.device); the current device fills a missing index only when `resolve`."""
    import torch

    if isinstance(device, int) and not isinstance(device, bool):
        return f"cuda:{device}"
    index = None if device is None else torch.device(device).index
    if index is None:
        if not resolve:
            return "cuda (the current device)"
        index = torch.cuda.current_device()
    return f"cuda:{index}"


@functools.cache
def _mode_class() -> type[Any]:
    """The dispatch mode class, made on first use (torch is imported only then)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class DeviceAuditMode(TorchDispatchMode):  # type: ignore[misc]
        def __init__(self, audit: DeviceAudit) -> None:
            super().__init__()
            self.audit = audit

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            op = func.name()  # "aten::mm", "aten::add.Tensor"
            self.audit.check_tensors(op, (args, kwargs))
            out = func(*args, **kwargs)
            self.audit.check_tensors(op, out)
            return out

    return DeviceAuditMode


def _patch_cuda_calls(torch: Any) -> None:
    """Wrap the CUDA calls that name a device but are not ops, once per process: in a
    thread with an audit active they are checked, elsewhere they pass straight on."""
    global _patched_cuda_calls
    with _PATCH_LOCK:
        if _patched_cuda_calls:
            return
        cuda = torch.cuda
        synchronize = cuda.synchronize
        set_device = cuda.set_device
        stream_synchronize = cuda.Stream.synchronize

        @functools.wraps(synchronize)
        def audited_synchronize(device: Any = None) -> None:
            audit = active_audit()
            if audit is not None:
                audit.check_cuda_call("torch.cuda.synchronize", device)
            synchronize(device)

        @functools.wraps(set_device)
        def audited_set_device(device: Any) -> None:
            audit = active_audit()
            if audit is not None:
                audit.check_cuda_call("torch.cuda.set_device", device)
            set_device(device)

        @functools.wraps(stream_synchronize)
        def audited_stream_synchronize(self: Any) -> None:
            audit = active_audit()
            if audit is not None:
                audit.check_cuda_call("torch.cuda.Stream.synchronize", self.device)
            stream_synchronize(self)

        cuda.synchronize = audited_synchronize
        cuda.set_device = audited_set_device
        cuda.Stream.synchronize = audited_stream_synchronize
        _patched_cuda_calls = True
