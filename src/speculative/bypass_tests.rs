//! Tests of the bypass: the drafting decision on synthetic cost profiles (a lavapipe-like one
//! never pays at the prior, a GPU-like one does) and the planner's probes and stretches.
use super::*;

/// Runs `steps` decode steps against a drafter with fixed costs and acceptance; returns
/// the decision of each step.
fn run(bypass: &mut Bypass, steps: usize, cycle: (f64, f64, u32, u32), plain: f64) -> Vec<bool> {
    (0..steps)
        .map(|_| {
            let draft = bypass.should_draft();
            if draft {
                bypass.record_cycle(cycle.0, cycle.1, cycle.2, cycle.3);
            } else {
                bypass.record_plain(plain);
            }
            draft
        })
        .collect()
}

fn seeded(config: BypassConfig, t_plain: f64) -> Bypass {
    let mut b = Bypass::new(config).expect("valid config");
    b.record_plain(t_plain);
    b
}

/// The indices of steps that start a run of drafting steps.
fn probe_starts(decisions: &[bool]) -> Vec<usize> {
    (1..decisions.len())
        .filter(|&i| decisions[i] && !decisions[i - 1])
        .collect()
}

#[test]
fn expensive_useless_drafter_is_bypassed_and_probed() {
    // τ = 1 (nothing accepted), drafting + verifying 17 ms against a 10 ms plain step.
    let config = BypassConfig::default();
    let mut b = seeded(config, 0.010);
    let d = run(&mut b, 1000, (0.005, 0.012, 7, 0), 0.010);
    // Warm-up of p cycles, then bypasses of 64, 128, 256, 512 plain steps (each probe
    // lost again), each followed by a p-cycle probe.
    let p = config.probe_cycles as usize;
    assert!(d[..p].iter().all(|&x| x));
    assert!(d[p..p + 64].iter().all(|&x| !x));
    let starts = probe_starts(&d);
    let first = p + 64;
    let want = [
        first,
        first + 128 + p,
        first + 128 + 256 + 2 * p,
        first + 128 + 256 + 512 + 3 * p,
    ];
    assert_eq!(starts, want);
    assert_eq!(d.iter().filter(|&&x| x).count(), p * (1 + starts.len()));
    // The stretch stops doubling at max_plain_steps.
    let mut b = seeded(config, 0.010);
    let d = run(&mut b, 12000, (0.005, 0.012, 7, 0), 0.010);
    let starts = probe_starts(&d);
    let gaps: Vec<usize> = starts.windows(2).map(|p| p[1] - p[0]).collect();
    assert_eq!(
        gaps[..5],
        [128 + p, 256 + p, 512 + p, 1024 + p, 1024 + p],
        "probes at {starts:?}"
    );
}

#[test]
fn good_drafter_is_never_bypassed() {
    // τ = 4 for 14 ms against a 10 ms plain step.
    let mut b = seeded(BypassConfig::default(), 0.010);
    let d = run(&mut b, 2000, (0.002, 0.012, 7, 3), 0.010);
    assert!(d.iter().all(|&x| x));
    assert!(!b.bypassing());
}

#[test]
fn breaker_needs_no_timing() {
    // t_plain never measured: only the breaker can act. 1 of 7 per cycle is 0.14 >= 0.1:
    // kept; 0 of 7: bypassed once the 32-draft window is full (5 cycles), then probed.
    let mut b = Bypass::new(BypassConfig::default()).expect("valid config");
    let d = run(&mut b, 500, (0.005, 0.012, 7, 1), f64::NAN);
    assert!(d.iter().all(|&x| x));
    let config = BypassConfig {
        probe_cycles: 0,
        ..BypassConfig::default()
    };
    let mut b = Bypass::new(config).expect("valid config");
    let d = run(&mut b, 500, (0.005, 0.012, 7, 0), f64::NAN);
    assert!(d[..5].iter().all(|&x| x) && !d[5]);
    assert_eq!(probe_starts(&d)[..2], [69, 69 + 69]);
}

#[test]
fn drafter_that_recovers_is_picked_up_by_the_next_probe() {
    let mut b = seeded(BypassConfig::default(), 0.010);
    let bad = run(&mut b, 100, (0.005, 0.012, 7, 0), 0.010);
    assert!(bad.iter().any(|&x| !x));
    let mut good = run(&mut b, 500, (0.002, 0.012, 7, 3), 0.010);
    let first = good.iter().position(|&x| x).expect("a probe");
    assert!(good.drain(first..).all(|x| x));
}

#[test]
fn never_does_not_bypass() {
    let mut b = seeded(BypassConfig::never(), 0.001);
    let d = run(&mut b, 1000, (0.050, 0.050, 7, 0), 0.001);
    assert!(d.iter().all(|&x| x));
}

/// lavapipe-like: a plain step 55 ms, verify of 8 rows 2 steps, a draft 0.8 step, the
/// injection 0.1 step (a cycle breaks even at τ = 2.9).
const LAVAPIPE: CycleCosts = CycleCosts {
    step: 0.055,
    draft: 0.044,
    inject: 0.0055,
    verify: 0.110,
    verify_rows: 8,
};

/// GPU-like: a plain step 10 ms, verify of 8 rows 1.1 steps, a draft 0.15 step, the
/// injection 0.05 step (break-even at τ = 1.3).
const GPU: CycleCosts = CycleCosts {
    step: 0.010,
    draft: 0.0015,
    inject: 0.0005,
    verify: 0.011,
    verify_rows: 8,
};

fn profiled(costs: CycleCosts) -> Bypass {
    let config = BypassConfig {
        costs: Some(costs),
        ..BypassConfig::default()
    };
    Bypass::new(config).expect("valid config")
}

#[test]
fn decision_is_the_expected_rate_against_a_plain_step() {
    let prior = TauPrior::default();
    let tau0 = estimate_tau(prior, 0, 0);
    assert_eq!(tau0, 2.0);
    // lavapipe: 2 / 2.9 of plain speed at the prior, and even τ = 2.9 is below the margin.
    assert!((expected_speedup(&LAVAPIPE, 2.9) - 1.0).abs() < 1e-9);
    assert!(!drafting_pays(&LAVAPIPE, tau0, 1.05));
    assert!(!drafting_pays(&LAVAPIPE, 2.9, 1.05));
    assert!(drafting_pays(&LAVAPIPE, 3.2, 1.05));
    // GPU: 2 / 1.3 = 1.54 at the prior.
    assert!(drafting_pays(&GPU, tau0, 1.05));
    assert!(!drafting_pays(&GPU, 1.3, 1.05));
    // The draft's own cost counts: verify alone (1.1 steps) would pay at τ = 1.2.
    let verify_only = CycleCosts {
        draft: 0.0,
        inject: 0.0,
        ..GPU
    };
    assert!(drafting_pays(&verify_only, 1.2, 1.05) && !drafting_pays(&GPU, 1.2, 1.05));
    // Observed cycles move the estimate from the prior: 4 cycles of τ = 1 halve the gap.
    assert!((estimate_tau(prior, 4, 4) - 1.5).abs() < 1e-12);
    assert!((estimate_tau(prior, 12, 48) - 3.5).abs() < 1e-12);
    // An invalid profile never pays.
    let bad = CycleCosts {
        step: f64::NAN,
        ..GPU
    };
    assert_eq!(expected_speedup(&bad, 4.0), 0.0);
}

#[test]
fn lavapipe_like_profile_never_drafts_past_one_probe_cycle() {
    // The prior loses (2 / 2.9 of plain speed): one probe cycle, and with the shipped
    // drafter's τ ≈ 2 (or nothing accepted) never another.
    for accepted in [1, 0] {
        let mut b = profiled(LAVAPIPE);
        assert!(!b.never_drafts());
        let d = run(&mut b, 3000, (0.044, 0.110, 7, accepted), 0.055);
        assert!(d[0] && d[1..].iter().all(|&x| !x), "drafted past the probe");
        assert!(b.never_drafts());
    }
    // A drafter that accepts everything pays even there and keeps drafting.
    let mut b = profiled(LAVAPIPE);
    let d = run(&mut b, 500, (0.044, 0.110, 7, 7), 0.055);
    assert!(d.iter().all(|&x| x));
    // Verify of 8 rows at 4 steps: not even a perfect cycle pays; the probe cycle only.
    let slow = CycleCosts {
        verify: 0.220,
        ..LAVAPIPE
    };
    let mut b = profiled(slow);
    let d = run(&mut b, 3000, (0.044, 0.220, 7, 7), 0.055);
    assert!(d[0] && d[1..].iter().all(|&x| !x), "drafted past the probe");
}

#[test]
fn gpu_like_profile_drafts_and_stops_quickly_when_acceptance_is_low() {
    // τ = 3 measured at the profiled costs: drafts throughout.
    let mut b = profiled(GPU);
    assert!(!b.never_drafts());
    let d = run(&mut b, 2000, (0.002, 0.011, 7, 2), 0.010);
    assert!(d.iter().all(|&x| x));
    // Nothing accepted (τ = 1 < 1.37): stops within two probes' cycles (the prior weighs
    // 4 cycles), then probes only rarely.
    let mut b = profiled(GPU);
    let d = run(&mut b, 200, (0.002, 0.011, 7, 0), 0.010);
    let p = BypassConfig::default().probe_cycles as usize;
    let first_plain = d.iter().position(|&x| !x).expect("a bypass");
    assert!((p..=2 * p).contains(&first_plain), "{first_plain}");
    assert!(d.iter().filter(|&&x| x).count() <= 3 * p);
}

/// What lavapipe measured for the shipped drafter (cached in `profiles/`): verify of 7 rows
/// 1.93 plain steps, a draft 1.09 (break-even at τ = 3.0, margin 1.05: 3.2).
const LAVAPIPE_MEASURED: CycleCosts = CycleCosts {
    step: 0.0586,
    draft: 0.0639,
    inject: 0.0002,
    verify: 0.1131,
    verify_rows: 7,
};

#[test]
fn cached_costs_decide_whether_a_drafter_is_loaded() {
    let with = |costs| BypassConfig {
        costs: Some(costs),
        ..BypassConfig::default()
    };
    // lavapipe: even a probe cycle that accepts every draft leaves the estimate (τ 2 → 3.0)
    // below the margin, so the planner would draft that cycle only: skip the drafter.
    assert_eq!(drafting_can_pay(with(LAVAPIPE_MEASURED)), Ok(false));
    let mut b = profiled(LAVAPIPE_MEASURED);
    let d = run(&mut b, 200, (0.0641, 0.1131, 6, 6), 0.0586);
    assert!(d[0] && d[1..].iter().all(|&x| !x), "the planner agrees");
    let slow = CycleCosts {
        verify: 0.220,
        ..LAVAPIPE
    };
    assert_eq!(drafting_can_pay(with(slow)), Ok(false));
    // GPU-like (verify of 8 rows 1.1 steps): pays at the prior already: keep it.
    assert_eq!(drafting_can_pay(with(GPU)), Ok(true));
    // Loses at the prior, but a perfect probe (τ 2 → 3.2 over 8 rows) would keep drafting:
    // an upper bound keeps the drafter.
    assert_eq!(drafting_can_pay(with(LAVAPIPE)), Ok(true));
    // Nothing measured, or the cost model off: keep it.
    assert_eq!(drafting_can_pay(BypassConfig::default()), Ok(true));
    let off = BypassConfig {
        margin: 0.0,
        ..with(slow)
    };
    assert_eq!(drafting_can_pay(off), Ok(true));
    // A bad profile is an error, not a verdict.
    let bad = CycleCosts { step: 0.0, ..GPU };
    assert!(drafting_can_pay(with(bad)).is_err());
}

#[test]
fn config_errors_name_the_value() {
    let bad = [
        BypassConfig {
            ema_alpha: 0.0,
            ..BypassConfig::default()
        },
        BypassConfig {
            margin: f64::NAN,
            ..BypassConfig::default()
        },
        BypassConfig {
            plain_steps: 0,
            ..BypassConfig::default()
        },
        BypassConfig {
            min_acceptance: 1.5,
            ..BypassConfig::default()
        },
        BypassConfig {
            max_plain_steps: 8,
            ..BypassConfig::default()
        },
    ];
    let names: Vec<_> = bad
        .iter()
        .map(|c| match Bypass::new(*c) {
            Err(BypassError::Invalid { name, .. }) => name,
            Ok(_) => "accepted",
        })
        .collect();
    assert_eq!(
        names,
        [
            "ema_alpha",
            "margin",
            "plain_steps",
            "min_acceptance",
            "max_plain_steps"
        ]
    );
}
