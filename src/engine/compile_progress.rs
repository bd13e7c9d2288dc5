//! The progress a load shows while its GPU pipelines are set up and built: on a terminal a
//! bar ("compiling N GPU kernels", kept current by a thread); else, once done, one line on
//! stderr with the count and the time, when it took over a second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::gpu::GpuContext;
use crate::Result;

/// Shown while a load's pipelines are set up and built: on a terminal, a bar
/// ("compiling N GPU kernels", kept current by a thread); else, once done, one line on stderr
/// with the count and the time, when it took over a second.
pub(super) struct CompileProgress {
    bar: indicatif::ProgressBar,
    start: Instant,
    builds: u64,
    stop: Arc<AtomicBool>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl CompileProgress {
    pub(super) fn start(ctx: &Arc<GpuContext>, progress: bool) -> CompileProgress {
        let stop = Arc::new(AtomicBool::new(false));
        let (bar, ticker) = if progress {
            let style = indicatif::ProgressStyle::with_template(
                "compiling {len} GPU kernels {bar:30} {pos}/{len} {elapsed}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            let bar = indicatif::ProgressBar::new(0).with_style(style);
            let (ctx, shown, stop) = (Arc::clone(ctx), bar.clone(), Arc::clone(&stop));
            let ticker = std::thread::Builder::new()
                .name("flint-compile-progress".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let cache = ctx.pipelines();
                        let total = cache.len();
                        if total > 0 {
                            shown.set_length(total as u64);
                            shown.set_position(total.saturating_sub(cache.pending()) as u64);
                        }
                        std::thread::park_timeout(Duration::from_millis(100));
                    }
                })
                .ok();
            (bar, ticker)
        } else {
            (indicatif::ProgressBar::hidden(), None)
        };
        CompileProgress {
            bar,
            start: Instant::now(),
            builds: ctx.pipelines().builds().builds,
            stop,
            ticker,
        }
    }

    /// Waits for every pipeline set up so far ([`PipelineCache::wait_all`]).
    pub(super) fn finish(mut self, ctx: &GpuContext) -> Result<()> {
        let cache = ctx.pipelines();
        if self.ticker.is_some() {
            self.stop_ticker();
        }
        let bar = &self.bar;
        let waited = cache.wait_all_with(|done, total| {
            if total > 0 {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            }
        });
        self.bar.finish_and_clear();
        waited?;
        let took = self.start.elapsed();
        let built = cache.builds().builds.saturating_sub(self.builds);
        if self.bar.is_hidden() && built > 0 && took > Duration::from_secs(1) {
            eprintln!(
                "compiled {built} GPU kernels in {:.1} s",
                took.as_secs_f64()
            );
        }
        Ok(())
    }

    fn stop_ticker(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for CompileProgress {
    fn drop(&mut self) {
        self.stop_ticker();
        self.bar.finish_and_clear();
    }
}
