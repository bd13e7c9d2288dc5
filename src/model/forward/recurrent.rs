//! The recurrent state of a hybrid model's forward, and how it follows the KV cache back.
//!
//! A DeltaNet layer's state (conv window and S matrix) holds every row it has seen; unlike K/V
//! rows it cannot be cut at a position. A rollback therefore restores a checkpoint and replays
//! the rows to keep: [`Forward::checkpoint`] copies every state once (before a verify batch),
//! [`Forward::truncate`] to a position `p` between the checkpoint and now restores the copy and
//! reruns the `p − checkpoint` kept rows through the model (their K/V are rewritten with the same
//! bits, the recurrence runs row by row in both passes, so the state is exactly the state after
//! those rows). The memory is one state copy, whatever the verify length: llama.cpp keeps
//! `1 + n_rs_seq` copies (one per draft position) instead. A step starting at position 0 zeroes
//! the state first.

use crate::gpu::GpuContext;
use crate::{Error, Result};

use super::Forward;

/// Where the state stands relative to a checkpoint.
#[derive(Debug, Default, Clone)]
pub(crate) struct StateLog {
    /// Position (rows seen) when the checkpoint was taken.
    pub ckpt_pos: Option<u32>,
    /// Tokens run since the checkpoint, in order (what a rollback replays).
    pub since: Vec<u32>,
}

fn encode(ctx: &GpuContext, label: &str, f: impl FnOnce(&mut wgpu::CommandEncoder)) -> Result<()> {
    ctx.scoped(label, 0, |device| {
        let mut encoder =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) });
        f(&mut encoder);
        ctx.queue().submit([encoder.finish()]);
        ctx.counters().submitted();
    })?;
    Ok(())
}

impl Forward {
    /// Whether the model carries a recurrent state.
    pub fn is_recurrent(&self) -> bool {
        self.buffers.hybrid.is_some()
    }

    /// Zeroes every recurrent state (a sequence starting over).
    pub(crate) fn zero_state(&mut self, ctx: &GpuContext) -> Result<()> {
        self.state_log = StateLog::default();
        let Some(hb) = &self.buffers.hybrid else {
            return Ok(());
        };
        encode(ctx, "zero recurrent state", |e| {
            for b in hb.states.iter().flatten() {
                e.clear_buffer(b, 0, None);
            }
        })
    }

    /// Copies the recurrent state aside so that [`Forward::truncate`] can go back to here.
    /// Nothing for dense models.
    pub fn checkpoint(&mut self, ctx: &GpuContext) -> Result<()> {
        let Some(hb) = &self.buffers.hybrid else {
            return Ok(());
        };
        encode(ctx, "recurrent checkpoint", |e| {
            for (src, dst) in hb
                .states
                .iter()
                .flatten()
                .zip(hb.checkpoint.iter().flatten())
            {
                e.copy_buffer_to_buffer(src, 0, dst, 0, src.size());
            }
        })?;
        self.state_log = StateLog {
            ckpt_pos: Some(self.kv.len(0)?),
            since: Vec::new(),
        };
        Ok(())
    }

    /// Whether [`Forward::truncate`] can go back to `pos`.
    pub fn can_truncate(&self, pos: u32) -> bool {
        let Ok(len) = self.kv.len(0) else {
            return false;
        };
        if !self.is_recurrent() || pos == len || pos == 0 {
            return pos <= len;
        }
        matches!(self.state_log.ckpt_pos, Some(c) if c <= pos && pos <= len)
    }

    /// Drops the rows from `pos` on: the KV cache's, and for a hybrid model the recurrent
    /// state's (restoring the checkpoint and replaying the kept rows; see the module header).
    /// An error names the positions where no checkpoint covers `pos`.
    pub fn truncate(&mut self, ctx: &GpuContext, pos: u32) -> Result<()> {
        let len = self.kv.len(0)?;
        if !self.is_recurrent() || pos == len {
            self.kv.truncate_to(0, pos)?;
            return Ok(());
        }
        if pos == 0 {
            self.kv.truncate_to(0, 0)?;
            return self.zero_state(ctx);
        }
        let ckpt = match self.state_log.ckpt_pos {
            Some(c) if c <= pos && pos <= len => c,
            _ => {
                return Err(Error::Usage(format!(
                    "the recurrent state cannot go back from row {len} to row {pos}: no \
                     checkpoint at or before it since ({:?})",
                    self.state_log.ckpt_pos
                )))
            }
        };
        let keep: Vec<u32> = self.state_log.since[..(pos - ckpt) as usize].to_vec();
        let hb = self.buffers.hybrid()?;
        encode(ctx, "recurrent restore", |e| {
            for (dst, src) in hb
                .states
                .iter()
                .flatten()
                .zip(hb.checkpoint.iter().flatten())
            {
                e.copy_buffer_to_buffer(src, 0, dst, 0, src.size());
            }
        })?;
        self.kv.truncate_to(0, ckpt)?;
        self.state_log.since.clear();
        // Replay the kept rows without logits or taps; the last step's logits stay readable.
        let n_logits = self.n_logits;
        for chunk in keep.chunks(self.max_rows as usize) {
            self.run_inner(ctx, chunk, 0, false, false)?;
        }
        self.n_logits = n_logits;
        Ok(())
    }
}
