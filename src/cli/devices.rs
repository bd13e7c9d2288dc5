//! `flint devices`: every adapter wgpu finds (respecting `FLINT_BACKEND`), with the index that
//! `--device N` takes, backend, type, driver, features and the limits flint cares about.
//! and the memory: the device-local memory the driver reports, its budget and usage where it
//! reports them, and the budget flint would plan against (`memory::budget`). `--json` prints one
//! JSON array instead.

use crate::gpu::adapters::list_adapters_with_memory;
use crate::gpu::{AdapterSummary, DriverMemory};
use crate::memory::{fmt_bytes, Budget};

/// Arguments of `flint devices`.
#[derive(Debug, clap::Args)]
pub struct DevicesArgs {
    /// Print one JSON array instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Lists the adapters; an empty list is not an error (the text says so).
pub fn run(json: bool) -> crate::Result<()> {
    let adapters = list_adapters_with_memory()?;
    if json {
        let array: Vec<serde_json::Value> = adapters.iter().map(|(a, m)| to_json(a, *m)).collect();
        let text = serde_json::to_string_pretty(&serde_json::Value::Array(array))
            .map_err(|e| crate::Error::Usage(format!("serializing the device list: {e}")))?;
        println!("{text}");
        return Ok(());
    }
    if adapters.is_empty() {
        println!("no GPU adapter found (FLINT_BACKEND restricts the backends searched)");
        return Ok(());
    }
    for (a, m) in &adapters {
        print!("{}", to_text(a, *m));
    }
    Ok(())
}

/// The budget flint would plan against on `a` without `--gpu-mem`.
fn plan_budget(a: &AdapterSummary, m: Option<DriverMemory>) -> Budget {
    Budget::resolve_for(None, a.device_type == "Cpu", m)
}

/// One adapter as JSON (field names as in [`AdapterSummary`]; `memory`: the driver's figures in
/// bytes, `null` where it reports none, and the budget flint would plan against).
pub fn to_json(a: &AdapterSummary, m: Option<DriverMemory>) -> serde_json::Value {
    let l = &a.limits;
    let b = plan_budget(a, m);
    serde_json::json!({
        "index": a.index,
        "name": a.name,
        "backend": a.backend,
        "device_type": a.device_type,
        "driver": a.driver,
        "driver_info": a.driver_info,
        "vendor": a.vendor,
        "device": a.device,
        "features": a.features,
        "limits": {
            "max_storage_buffer_binding_size": l.max_storage_buffer_binding_size,
            "max_buffer_size": l.max_buffer_size,
            "max_compute_workgroup_storage_size": l.max_compute_workgroup_storage_size,
            "max_compute_invocations_per_workgroup": l.max_compute_invocations_per_workgroup,
            "max_compute_workgroup_size_x": l.max_compute_workgroup_size_x,
            "max_compute_workgroups_per_dimension": l.max_compute_workgroups_per_dimension,
            "max_storage_buffers_per_shader_stage": l.max_storage_buffers_per_shader_stage,
            "min_subgroup_size": l.min_subgroup_size,
            "max_subgroup_size": l.max_subgroup_size,
        },
        "memory": {
            "device_local_bytes": m.map(|m| m.device_local),
            "driver_budget_bytes": m.and_then(|m| m.budget),
            "driver_usage_bytes": m.and_then(|m| m.usage),
            "budget_bytes": b.bytes,
            "headroom_bytes": b.headroom,
            "usable_bytes": b.usable(),
            "budget_source": b.source.name(),
        },
    })
}

/// One adapter as indented text.
pub fn to_text(a: &AdapterSummary, m: Option<DriverMemory>) -> String {
    let l = &a.limits;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut s = format!(
        "[{}] {}\n    backend {}, type {}, vendor {:#06x}, device {:#06x}\n    driver {} ({})\n",
        a.index, a.name, a.backend, a.device_type, a.vendor, a.device, a.driver, a.driver_info
    );
    s.push_str(&format!(
        "    max storage binding {} B ({:.0} MiB), max buffer {} B ({:.0} MiB)\n",
        l.max_storage_buffer_binding_size,
        mib(l.max_storage_buffer_binding_size),
        l.max_buffer_size,
        mib(l.max_buffer_size),
    ));
    s.push_str(&format!(
        "    workgroup storage {} B, invocations/workgroup {}, size x {}, groups/dim {}, \
         storage buffers/stage {}, subgroup size {}..{}\n",
        l.max_compute_workgroup_storage_size,
        l.max_compute_invocations_per_workgroup,
        l.max_compute_workgroup_size_x,
        l.max_compute_workgroups_per_dimension,
        l.max_storage_buffers_per_shader_stage,
        l.min_subgroup_size,
        l.max_subgroup_size,
    ));
    s.push_str(&format!("    features: {}\n", a.features.join(", ")));
    s.push_str(&format!("    {}\n", memory_line(a, m)));
    s
}

/// `memory: device-local 15.99 GiB (driver budget 15.2 GiB, usage 0 B); plans against 15.19 GiB
/// (device-local heap)`.
fn memory_line(a: &AdapterSummary, m: Option<DriverMemory>) -> String {
    let b = plan_budget(a, m);
    let driver = match m {
        Some(m) => {
            let mut s = format!("device-local {}", fmt_bytes(m.device_local));
            if let (Some(budget), Some(usage)) = (m.budget, m.usage) {
                s.push_str(&format!(
                    " (driver budget {}, usage {})",
                    fmt_bytes(budget),
                    fmt_bytes(usage)
                ));
            }
            s
        }
        None => "the driver reports no device memory".to_string(),
    };
    format!(
        "memory: {driver}; plans against {} ({})",
        fmt_bytes(b.usable()),
        b.source.name()
    )
}

/// The adapter `-dev VALUE` names among `adapters` (`flint devices`' index and name): an index,
/// or a case-insensitive part of one adapter's name. An unknown or ambiguous name is refused,
/// listing the adapters.
pub fn choose_adapter(value: &str, adapters: &[(usize, String)]) -> crate::Result<usize> {
    if let Ok(i) = value.trim().parse::<usize>() {
        return Ok(i);
    }
    let want = value.to_lowercase();
    let hits: Vec<_> = adapters
        .iter()
        .filter(|(_, n)| n.to_lowercase().contains(&want))
        .collect();
    let list = || {
        let all: Vec<String> = adapters.iter().map(|(i, n)| format!("{i}: {n}")).collect();
        if all.is_empty() {
            "no adapter found".to_string()
        } else {
            format!("adapters: {}", all.join("; "))
        }
    };
    match hits.as_slice() {
        [(i, _)] => Ok(*i),
        [] => Err(crate::Error::Usage(format!(
            "-dev {value:?}: no adapter's name contains it ({})",
            list()
        ))),
        _ => Err(crate::Error::Usage(format!(
            "-dev {value:?}: names {} adapters; give more of the name or the index ({})",
            hits.len(),
            list()
        ))),
    }
}

/// `-dev` as an adapter index: `None` stays `None`, an index is kept, a name is looked up in
/// the adapters wgpu finds ([`choose_adapter`]).
pub fn resolve_device(value: Option<&str>) -> crate::Result<Option<usize>> {
    let Some(v) = value else { return Ok(None) };
    if let Ok(i) = v.trim().parse::<usize>() {
        return Ok(Some(i));
    }
    let adapters: Vec<(usize, String)> = crate::gpu::adapters::list_adapters()?
        .into_iter()
        .map(|a| (a.index, a.name))
        .collect();
    choose_adapter(v, &adapters).map(Some)
}

/// clap's parser of `-dev`/`--device`: an index, or a part of an adapter's name.
pub fn parse_device(value: &str) -> Result<usize, String> {
    match resolve_device(Some(value)) {
        Ok(Some(i)) => Ok(i),
        Ok(None) => Err(format!("{value:?}: not an adapter")),
        Err(e) => Err(e.to_string()),
    }
}
