//! The budget a plan is checked against and the context a run takes without `-c`.
//!
//! - `flint devices --json` reports each Vulkan adapter's device-local memory (and budget and
//!   usage where `VK_EXT_memory_budget` is present) exactly as the driver does, read here
//!   through a separate Vulkan instance with ash and matched by device name.
//! - `flint plan --json` names its budget's source and bytes and the context, slots and cache
//!   types it planned.
//! - Without `-c`, the Qwen3-8B Q4_K_M preset plans its trained 40960 under 16 GiB, and under
//!   6 GiB the largest multiple of 256 whose plan fits: the next multiple's plan, computed by an
//!   explicit `-c`, does not. An explicit `-c 131072` is refused with alternatives.
//! - `flint generate` without `-c` takes SmolLM2's trained context (as gguf-py reads it) and says
//!   so; with a `-c` that does not fit it is refused naming the largest that does, which runs.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn flint(args: &[&str]) -> (Option<i32>, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .env("FLINT_BACKEND", "vulkan")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), json, stderr)
}

/// The Qwen3-8B Q4_K_M preset, shape only, written once per test process.
fn qwen3_8b() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("flint-budget-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("qwen3-8b-q4_k_m.gguf");
        let p = path.to_str().unwrap();
        let (code, _, err) = flint(&["gguf", "preset", "qwen3-8b-q4_k_m", p]);
        assert_eq!(code, Some(0), "{err}");
        path
    })
    .clone()
}

fn plan(model: &Path, extra: &[&str]) -> (Option<i32>, Value, String) {
    let mut args = vec!["plan", "-m", model.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    flint(&args)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A Vulkan physical device's device-local heaps as the driver reports them.
#[derive(Debug)]
struct Heaps {
    name: String,
    bytes: u64,
    /// Budget and usage, where `VK_EXT_memory_budget` is present.
    budget: Option<(u64, u64)>,
}

/// The device-local heaps of every Vulkan physical device, read with ash.
fn vulkan_heaps() -> Vec<Heaps> {
    use ash::vk;
    // SAFETY: the loader is loaded once and the instance destroyed before returning.
    let entry = unsafe { ash::Entry::load() }.expect("no Vulkan loader");
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_1);
    let info = vk::InstanceCreateInfo::default().application_info(&app);
    let instance = unsafe { entry.create_instance(&info, None) }.expect("vkCreateInstance");
    let mut out = Vec::new();
    for phd in unsafe { instance.enumerate_physical_devices() }.unwrap() {
        let props = unsafe { instance.get_physical_device_properties(phd) };
        let name = props
            .device_name_as_c_str()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let exts = unsafe { instance.enumerate_device_extension_properties(phd) }.unwrap();
        let has_budget = exts
            .iter()
            .any(|e| e.extension_name_as_c_str() == Ok(ash::ext::memory_budget::NAME));
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let mut mem = vk::PhysicalDeviceMemoryProperties2::default();
        if has_budget {
            mem = mem.push_next(&mut budget);
        }
        unsafe { instance.get_physical_device_memory_properties2(phd, &mut mem) };
        let m = mem.memory_properties;
        let local: Vec<usize> = (0..m.memory_heap_count as usize)
            .filter(|&i| {
                m.memory_heaps[i]
                    .flags
                    .contains(vk::MemoryHeapFlags::DEVICE_LOCAL)
            })
            .collect();
        let heap = local.iter().map(|&i| m.memory_heaps[i].size).sum();
        let b = has_budget.then(|| {
            (
                local.iter().map(|&i| budget.heap_budget[i]).sum(),
                local.iter().map(|&i| budget.heap_usage[i]).sum(),
            )
        });
        out.push(Heaps {
            name,
            bytes: heap,
            budget: b,
        });
    }
    unsafe { instance.destroy_instance(None) };
    out
}

#[test]
fn devices_report_the_drivers_heaps() {
    let driver = vulkan_heaps();
    assert!(!driver.is_empty(), "the Vulkan loader found no device");
    let (code, v, err) = flint(&["devices", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let adapters = v.as_array().unwrap();
    let mut matched = 0;
    for Heaps {
        name,
        bytes: heap,
        budget,
    } in &driver
    {
        let Some(a) = adapters.iter().find(|a| a["name"] == name.as_str()) else {
            continue;
        };
        matched += 1;
        let m = &a["memory"];
        assert_eq!(u(&m["device_local_bytes"]), *heap, "{name}: {m}");
        match budget {
            // The budget moves with every allocation in the system: its presence is held,
            // and the usage of a process that has allocated nothing.
            Some(_) => assert!(m["driver_budget_bytes"].is_u64(), "{name}: {m}"),
            None => assert!(m["driver_budget_bytes"].is_null(), "{name}: {m}"),
        }
        // Usable = bytes less headroom, and a CPU adapter plans against host memory.
        assert_eq!(
            u(&m["usable_bytes"]),
            u(&m["budget_bytes"]) - u(&m["headroom_bytes"])
        );
        if a["device_type"] == "Cpu" {
            assert_eq!(m["budget_source"], "host memory", "{name}: {m}");
        } else {
            assert_ne!(m["budget_source"], "default", "{name}: {m}");
        }
    }
    assert!(
        matched > 0,
        "no flint adapter named as the driver's {driver:?}"
    );
}

#[test]
fn plan_json_names_budget_and_context() {
    let model = qwen3_8b();
    let (code, v, err) = plan(&model, &["--gpu-mem", "16GiB", "-np", "2", "-ctk", "q8_0"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(v["budget"]["source"], "--gpu-mem");
    assert_eq!(u(&v["budget"]["bytes"]), 16 << 30);
    assert_eq!(
        u(&v["budget"]["usable_bytes"]),
        (16u64 << 30) - u(&v["budget"]["headroom_bytes"])
    );
    assert_eq!(u(&v["n_slots"]), 2);
    assert_eq!(u(&v["n_ctx_train"]), 40960);
    // Two slots share the trained context.
    assert_eq!((u(&v["n_ctx"]), u(&v["n_ctx_total"])), (20480, 40960));
    assert_eq!(v["ctx_source"], "trained");
    assert_eq!(
        (v["type_k"].as_str(), v["type_v"].as_str()),
        (Some("q8_0"), Some("f16"))
    );
    assert_eq!(u(&v["n_ubatch"]), 512);
    assert!(
        err.contains("-c 40960 (2 slots of 20480) (trained), fits in 16.00 GiB"),
        "{err}"
    );
}

#[test]
fn default_context_is_trained_when_it_fits() {
    let (code, v, err) = plan(&qwen3_8b(), &["--gpu-mem", "16GiB"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        (u(&v["n_ctx"]), v["ctx_source"].as_str()),
        (40960, Some("trained"))
    );
    assert_eq!(v["fits"], true);
    assert!(u(&v["total_bytes"]) <= u(&v["budget"]["usable_bytes"]));
}

#[test]
fn default_context_is_the_largest_that_fits() {
    let model = qwen3_8b();
    let (code, v, err) = plan(&model, &["--gpu-mem", "6GiB"]);
    assert_eq!(code, Some(0), "{err}");
    let n = u(&v["n_ctx"]);
    assert_eq!(v["ctx_source"], "fit");
    assert!(n.is_multiple_of(256) && (4096..40960).contains(&n), "{n}");
    let usable = u(&v["budget"]["usable_bytes"]);
    assert!(u(&v["total_bytes"]) <= usable);
    assert!(
        err.contains(&format!(
            "-c {n}: the largest that fits 6.00 GiB (--gpu-mem); the model was trained for 40960"
        )),
        "{err}"
    );
    // The same context asked for explicitly plans the same bytes; the next multiple does not fit.
    let (code, same, _) = plan(&model, &["--gpu-mem", "6GiB", "-c", &n.to_string()]);
    assert_eq!(code, Some(0));
    assert_eq!(same["ctx_source"], "-c");
    assert_eq!(same["total_bytes"], v["total_bytes"]);
    let next = (n + 256).to_string();
    let (code, over, _) = plan(&model, &["--gpu-mem", "6GiB", "-c", &next]);
    assert_ne!(code, Some(0));
    assert_eq!(over["fits"], false);
    assert!(u(&over["total_bytes"]) > usable);
}

#[test]
fn explicit_context_is_kept_and_refused_with_alternatives() {
    let (code, v, err) = plan(&qwen3_8b(), &["--gpu-mem", "6GiB", "-c", "131072"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        (u(&v["n_ctx"]), v["ctx_source"].as_str()),
        (131072, Some("-c"))
    );
    assert_eq!(v["fits"], false);
    let alts: Vec<&str> = v["suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(alts.iter().any(|a| a.starts_with("largest -c")), "{alts:?}");
}

#[test]
fn under_4096_the_floor_is_refused() {
    // The weights (4.68 GiB) leave less than 4096 rows of f16 K/V in 5 GiB.
    let (code, v, err) = plan(&qwen3_8b(), &["--gpu-mem", "5GiB"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        (u(&v["n_ctx"]), v["ctx_source"].as_str()),
        (4096, Some("floor"))
    );
    assert!(!v["suggestions"].as_array().unwrap().is_empty(), "{v}");
}

const SMOLLM2: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// SmolLM2's trained context as gguf-py reads the file (`tests/data/smollm2_gguf_py.json`).
fn smollm2_trained() -> u64 {
    let text = std::fs::read_to_string("tests/data/smollm2_gguf_py.json").unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    u(&v["metadata"]["llama.context_length"])
}

#[test]
fn generate_takes_the_trained_context_and_says_so() {
    let trained = smollm2_trained();
    let args = [
        "generate", "-m", SMOLLM2, "-p", "Hi", "-n", "1", "--temp", "0",
    ];
    let (code, _, err) = flint(&[&args[..], &["--no-spec"]].concat());
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(&format!("flint: -c {trained} (trained), fits in ")),
        "{err}"
    );
}

#[test]
fn generate_refuses_an_explicit_context_naming_what_fits() {
    let args = [
        "generate",
        "-m",
        SMOLLM2,
        "-p",
        "Hi",
        "-n",
        "1",
        "--no-spec",
    ];
    let (code, _, err) = flint(&[&args[..], &["-c", "131072", "--gpu-mem", "1GiB"]].concat());
    assert_eq!(code, Some(2), "{err}");
    let at = err
        .find("alternatives: largest -c with f16 KV: ")
        .expect(&err);
    let n: u32 = err[at..]
        .split(": ")
        .nth(2)
        .and_then(|s| s.trim().split([',', '\n']).next())
        .and_then(|s| s.parse().ok())
        .expect(&err);
    assert!(n.is_multiple_of(256) && n < 131072, "{n}");
    // The context it names loads and runs.
    let (code, _, err) = flint(&[&args[..], &["-c", &n.to_string(), "--gpu-mem", "1GiB"]].concat());
    assert_eq!(code, Some(0), "{err}");
}
