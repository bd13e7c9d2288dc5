//! The allocator that creates planned buffers by name and records each creation with the size
//! the device reports for it (`wgpu::Buffer::size`), so a run can be held to its memory plan
//! buffer by buffer (design principle 1).

use crate::gpu::buffers::create_storage;
use crate::gpu::GpuContext;
use crate::{Error, Result};

use super::{Plan, PlannedBuffer};

/// Creates planned buffers by name and records what it created.
pub struct Allocator<'a> {
    ctx: &'a GpuContext,
    plan: &'a Plan,
    pub records: Vec<(String, u64)>,
}

impl<'a> Allocator<'a> {
    pub fn new(ctx: &'a GpuContext, plan: &'a Plan) -> Self {
        Allocator {
            ctx,
            plan,
            records: Vec::new(),
        }
    }

    fn planned(&self, name: &str) -> Result<&'a PlannedBuffer> {
        self.plan
            .get(name)
            .ok_or_else(|| Error::Usage(format!("buffer {name} is not in the memory plan")))
    }

    /// Whether the plan has a buffer `name` (optional buffers such as a window's store).
    pub fn plan_has(&self, name: &str) -> bool {
        self.plan.get(name).is_some()
    }

    /// The storage buffer `name` of the plan, recorded with the size wgpu reports for it.
    pub fn storage(&mut self, name: &str) -> Result<wgpu::Buffer> {
        let b = self.planned(name)?;
        let buffer = create_storage(self.ctx, name, b.bytes)?;
        self.records.push((name.to_string(), buffer.size()));
        Ok(buffer)
    }
}
