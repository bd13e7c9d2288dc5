//! Ending a process that still has threads inside the GPU driver, without a crash at exit.
//!
//! `flint serve` ends on SIGTERM / SIGINT while other threads may still be in the driver: the
//! loader building the slots, the pipeline builders compiling (minutes on GL), a slot's worker
//! in the middle of a step that the shutdown grace did not wait for. A normal exit (returning
//! from `main`, `std::process::exit`) runs the C library's teardown on the exiting thread while
//! those threads go on: `atexit` handlers and shared-library destructors. Mesa's EGL registers
//! one that terminates every EGL display, so a pipeline builder's next `eglMakeCurrent` fails
//! with `EGL_BAD_DISPLAY`, wgpu-hal's GL backend panics on it (`egl.rs`, `unwrap` of
//! `BadDisplay`), and freeing while the heap is being torn down ended in glibc's
//! `malloc_consolidate(): unaligned fastbin chunk detected`, exit 134. The same teardown runs
//! LLVM's static destructors under lavapipe's and llvmpipe's shader compilers.
//!
//! Tearing the device down in order is not possible in bounded time: a pipeline build cannot
//! be interrupted, and a GL prefill's first build took 72 s on two cores. So
//! [`end_process`] flushes flint's own output and ends the process with `_exit`, which runs no
//! library teardown: the kernel stops every thread at once and reclaims memory, files and the
//! device, as it does for any process that a signal ends. Nothing flint holds needs more: the
//! server writes no files, and its clients were answered or cut by the shutdown before.

use std::io::Write;

#[cfg(unix)]
extern "C" {
    /// POSIX `_exit` (unistd.h): ends the process at once, without `atexit` handlers or
    /// library destructors.
    fn _exit(status: std::os::raw::c_int) -> !;
}

/// Flushes stdout and stderr, then ends the process with `code` without running library
/// teardown (see the module documentation). Off Unix, `std::process::exit`: Windows'
/// `ExitProcess` stops the other threads before it runs any library teardown.
pub fn end_process(code: i32) -> ! {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    #[cfg(unix)]
    // SAFETY: `_exit` takes any status, touches no memory of this process and never returns;
    // it is async-signal-safe, so no other thread's state can make the call unsound.
    unsafe {
        _exit(code)
    }
    #[cfg(not(unix))]
    std::process::exit(code)
}
