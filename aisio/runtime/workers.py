"""Worker processes, as every loader with workers runs them: they end with the training
process, and a reader knows which worker it runs in.

* :func:`die_with_parent` ends a worker when the training process dies (SIGKILL, a crash):
  ``PR_SET_PDEATHSIG`` on Linux when the worker was started from the main thread, and a
  thread that watches the parent in every case. DataLoader2 (``aisio.datapipes.mpfix``) and
  torch's DataLoader / StatefulDataLoader (:func:`init_worker`) both run it first in each
  worker.
* :func:`collect_before_fork` (or :func:`forking`, which collects only when a dropped
  loader's workers may be alive, and freezes the collector while the workers fork) and
  :func:`keep_inherited` keep a worker from running the finalizers of the training process's
  garbage: a loader dropped (or failed) before another started its workers is collected in
  the training process first, and whatever a worker inherited is never collected in it (a
  torch DataLoader iterator collected in a forked worker printed "Exception ignored in ...
  __del__: AssertionError: can only test a child process" as it tried to stop workers that
  are not its children).
* :func:`worker_id` is this process's worker number (0 in the training process), whichever
  loader started it: torch's ``get_worker_info()``, or what DataLoader2's worker set with
  :func:`set_worker_id`.
* :func:`prepare_process` registers, once in each process, how ``multiprocessing`` sends
  aisio's items (through shared memory): where a loader is built and as each worker starts.
* :func:`widen_pipe` makes the pipe that carries the workers' items to the training process
  hold :func:`pipe_bytes` (Linux). A batch of 64 samples of 2 KiB pickles to about 135 KB
  against a pipe's default 64 KiB, so a worker's write waited for the training process to
  drain each 64 KiB, and under DataLoader, whose workers share one queue and its write lock,
  the other worker waited too (the gain is measured in benchmarks/README.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # not on Windows
    fcntl = None  # type: ignore[assignment]

from aisio.core.faults.errors import ConfigError, WorkerDiedError
from aisio.core.order import reader
from aisio.core.system.processes import pid_alive
from aisio.core.transport import delivery

_PR_SET_PDEATHSIG = 1
#: How often the watching thread checks that the training process is still there (seconds).
PARENT_WATCH_SECONDS = 0.5
_WORKER_ID: int | None = None
#: How many bytes a pipe from the workers to the training process is made to hold unless
#: ``AISIO_PIPE_BYTES`` says otherwise (:func:`pipe_bytes`).
PIPE_BYTES = 1 << 20


def prepare_process() -> None:
    """Registers in this process what aisio's items need before they cross to another one:
    ``multiprocessing``'s pickler sends deliveries, and the deterministic order's packs of
    chunks, through shared memory (:mod:`aisio.core.transport.ring`). Idempotent. The set-up
    calls it as a loader is built (workers forked after that inherit it), and every worker
    calls it as it starts (a worker started by ``spawn`` or a fork server begins without it):
    :func:`init_worker`, :class:`EndsWithParent` and DataLoader2's (``aisio.datapipes.mpfix``).
    """
    delivery.register_reducer()
    reader.register_reducer()


def die_with_parent(parent: int, kernel: bool) -> None:
    """Ends this worker when the training process ``parent`` dies: at once by the kernel when
    ``kernel`` (the worker was started from the parent's main thread: ``PR_SET_PDEATHSIG``
    fires when the *thread* that started it ends), and within :data:`PARENT_WATCH_SECONDS`
    by a watching thread in every case (a worker started through a fork server, whose parent
    is that server, watches the training process by its pid)."""
    direct = os.getppid() == parent
    if kernel and direct and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    def parent_alive() -> bool:
        return os.getppid() == parent if direct else pid_alive(parent)

    if not parent_alive():  # the parent died before the lines above
        os._exit(1)

    def watch() -> None:
        while parent_alive():
            time.sleep(PARENT_WATCH_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="aisio-parent-watch", daemon=True).start()


def worker_died(loader: str, index: int, process: Any) -> WorkerDiedError:
    """Returns the error for worker ``index`` of ``loader`` ("DataLoader2", "DataLoader", ...),
    a ``multiprocessing`` process that ended without being asked to: its pid and signal."""
    code = process.exitcode
    if code is not None and code < 0:
        try:
            how = f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    hint = (" (the out-of-memory killer sends SIGKILL: check `dmesg`, lower num_workers, "
            "prefetch or batch size)" if code == -signal.SIGKILL else "")
    return WorkerDiedError(
        f"{loader} worker process {index} (pid {process.pid}) {how} before the epoch "
        f"ended{hint}; its samples are lost, so this epoch cannot complete: restart the loader",
        worker=index, pid=process.pid, exitcode=code)
def collect_before_fork() -> None:
    """Collects the training process's garbage now, before worker processes are forked from
    it: a loader dropped in a reference cycle has its workers stopped here, by its own
    finalizer, rather than its copy finalized in a new worker (see the module doc)."""
    gc.collect()


@contextlib.contextmanager
def forking() -> Iterator[None]:
    """Forks worker processes inside it without a full collection when none is needed.

    A dropped loader's workers are child processes that are still alive: with any alive, the
    garbage is collected first, as :func:`collect_before_fork` does. Either way the collector
    is frozen while the workers fork (``gc.freeze``, undone after), so a worker never
    finalizes what it inherited, not even before its ``worker_init_fn`` freezes it for good;
    the training process collects its garbage itself, later. A full collection delays the
    first batch of a process that imported torch (benchmarks/README.md, Figures behind the
    code's comments). Where the user
    froze objects of their own, it collects as before and leaves their freeze alone."""
    if gc.get_freeze_count() or multiprocessing.active_children():
        collect_before_fork()
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def keep_inherited() -> None:
    """Moves everything this worker inherited from the training process out of the garbage
    collector's reach (``gc.freeze``): the parent's objects are the parent's to finalize."""
    gc.freeze()


def set_worker_id(worker: int) -> None:
    """Records this process's worker number (for loaders that do not tell torch)."""
    global _WORKER_ID
    _WORKER_ID = worker


def worker_id() -> int:
    """Returns this process's worker number: 0 in the training process."""
    if _WORKER_ID is not None:
        return _WORKER_ID
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return info.id if info is not None else 0


def init_worker(worker: int, *, parent: int, kernel: bool,
                user_fn: Callable[[int], Any] | None = None) -> None:
    """A DataLoader ``worker_init_fn``: the worker ends with the training process, then
    ``user_fn`` (the trainer's own ``worker_init_fn``) runs."""
    keep_inherited()
    die_with_parent(parent, kernel)
    prepare_process()
    if user_fn is not None:
        user_fn(worker)


def worker_init_fn(user_fn: Callable[[int], Any] | None = None) -> Callable[[int], None]:
    """Returns the DataLoader ``worker_init_fn`` for workers started from this thread now."""
    return functools.partial(init_worker, parent=os.getpid(),
                             kernel=threading.current_thread() is threading.main_thread(),
                             user_fn=user_fn)


_WATCHING: int | None = None  # the pid of the process whose parent watch runs


class EndsWithParent:
    """Wraps a function that runs in worker processes a loader starts itself (torchdata.nodes'
    ``method="process"``): the first call in each process starts its watch on the training
    process (:func:`die_with_parent`, by the watching thread). Picklable when ``fn`` is."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.parent = os.getpid()

    def __call__(self, item: Any) -> Any:
        global _WATCHING
        if os.getpid() not in (_WATCHING, self.parent):
            _WATCHING = os.getpid()
            keep_inherited()
            die_with_parent(self.parent, kernel=False)
            prepare_process()
        return self.fn(item)


def pipe_bytes() -> int:
    """Returns how many bytes the pipes from the workers to the training process are made to
    hold: ``AISIO_PIPE_BYTES`` in the environment (read at each use; 0 leaves every pipe as the
    system makes it), else :data:`PIPE_BYTES`.

    Raises:
        ConfigError: ``AISIO_PIPE_BYTES`` is not a whole number of bytes, 0 or more.
    """
    given = os.environ.get("AISIO_PIPE_BYTES")
    if given is None:
        return PIPE_BYTES
    try:
        size = int(given)
    except ValueError:
        size = -1
    if size < 0:
        raise ConfigError(f"AISIO_PIPE_BYTES={given!r} in the environment is not a size: set "
                          "it to a whole number of bytes (0 leaves the pipes as the system "
                          f"makes them), or unset it for {PIPE_BYTES}")
    return size


def pipe_size(size: int | None = None) -> int:
    """Returns ``size`` (default: :func:`pipe_bytes`), or less if the system lets a process ask
    for less (``/proc/sys/fs/pipe-max-size``): the size :func:`widen_pipe` gives a pipe."""
    size = pipe_bytes() if size is None else size
    with contextlib.suppress(OSError, ValueError):
        size = min(size, int(Path("/proc/sys/fs/pipe-max-size").read_text()))
    return size


def widen_pipe(queue: Any, size: int | None = None) -> bool:
    """Makes the pipe under a ``multiprocessing`` queue hold :func:`pipe_size` bytes (``size``,
    default :func:`pipe_bytes`); returns whether it did. Anything else (no such queue, another
    system, a user over their pipe quota) is left as it is: a narrower pipe is slower, never
    wrong.

    Raises:
        ConfigError: ``AISIO_PIPE_BYTES`` is not a size (see :func:`pipe_bytes`).
    """
    size = pipe_bytes() if size is None else size
    end = getattr(queue, "_reader", None)
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if end is None or setsize is None or size <= 0:
        return False
    try:
        fcntl.fcntl(end.fileno(), setsize, pipe_size(size))
    except (OSError, ValueError):
        return False
    return True
