//! What the run commands (`generate`, `chat`, `serve`, `bench`) print once the model and the
//! device are open ([`crate::engine::open`], which also refuses a `-m` that is not a model flint
//! can run): the adapter, backend and driver line, and on GL what that costs and what to install.

use crate::gpu::GpuContext;

/// Prints the device line (and, on GL, its note) of `ctx` on stderr.
pub fn device(ctx: &GpuContext) {
    eprintln!("{}", crate::gpu::adapters::device_line(ctx.info()));
    if let Some(note) = crate::gpu::adapters::gl_note(ctx.info()) {
        eprintln!("{note}");
    }
}
