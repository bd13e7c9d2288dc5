//! The drafter decision on synthetic profiles.

use super::*;

/// Where accepting every draft pays but break-even is near the prior (τ ≈ 1.98 with the
/// margin): the acceptance decides. A verify of 8 rows.
fn close_costs() -> CycleCosts {
    CycleCosts {
        step: 0.0586,
        draft: 0.030,
        inject: 0.0002,
        verify: 0.080,
        verify_rows: 8,
    }
}

fn run(cycles: u64, committed: u64) -> RunObserved {
    RunObserved {
        cycles,
        committed,
        verify_rows: cycles * 8,
        position: 0.0,
    }
}

fn fixed(costs: &CycleCosts) -> Profile<'static> {
    Profile {
        costs: *costs,
        step_secs: None,
        deep: None,
        fixed: true,
    }
}

/// What `unpaying_drafter` does with a verdict: counts a run left out, arms a probe.
fn next_run(h: &mut History, costs: &CycleCosts) -> Verdict {
    let v = decide(&fixed(costs), h, BypassConfig::default());
    match v {
        Verdict::Load => {}
        Verdict::LeaveOut(_) => h.left_out += 1,
        Verdict::Probe(_) => {
            h.left_out = 0;
            h.probe = true;
        }
    }
    v
}

fn record(h: &mut History, r: RunObserved, costs: &CycleCosts) {
    record_run(h, r, &fixed(costs), &BypassConfig::default());
}

#[test]
fn a_short_unfriendly_prompt_does_not_decide_for_all() {
    let c = close_costs();
    let mut h = History::default();
    assert_eq!(next_run(&mut h, &c), Verdict::Load, "nothing observed");
    // 8 cycles accepting nothing (τ 1.33 with the prior): once enough to leave it out.
    record(&mut h, run(8, 8), &c);
    assert_eq!(next_run(&mut h, &c), Verdict::Load);
    // One long unfriendly generation weighs no more than RUN_WEIGHT_CAP cycles, one run.
    record(&mut h, run(600, 600), &c);
    let o = h.observed.unwrap();
    assert!(o.cycles <= 8.0 + RUN_WEIGHT_CAP, "{o:?}");
    assert_eq!(o.runs, 2);
    assert_eq!(
        next_run(&mut h, &c),
        Verdict::Load,
        "two runs do not decide"
    );
    // A third unfriendly one: now the acceptance decides.
    record(&mut h, run(16, 17), &c);
    let Verdict::LeaveOut(why) = next_run(&mut h, &c) else {
        panic!("three unfriendly runs: left out");
    };
    assert!(why.observed.is_some());
    assert_eq!(h.left_out, 1);
    // The average decays: friendly runs bring it back.
    let mut friendly = 0;
    while next_run(&mut h, &c) != Verdict::Load {
        h.left_out = 0;
        record(&mut h, run(32, 128), &c);
        friendly += 1;
        assert!(friendly < 10, "{h:?}");
    }
    assert!(friendly >= 1);
}

#[test]
fn a_stored_cannot_pay_is_reversed_by_a_probe_that_pays() {
    let c = close_costs();
    let mut h = History::default();
    for _ in 0..4 {
        record(&mut h, run(16, 17), &c);
    }
    // Left out PROBE_EVERY − 1 runs, then a probe.
    for i in 1..PROBE_EVERY {
        assert!(
            matches!(next_run(&mut h, &c), Verdict::LeaveOut(_)),
            "run {i}"
        );
    }
    assert!(matches!(next_run(&mut h, &c), Verdict::Probe(_)));
    assert!(h.probe);
    // A probe that does not pay is added, and the verdict stands.
    record(&mut h, run(4, 4), &c);
    assert!(!h.probe);
    assert!(matches!(next_run(&mut h, &c), Verdict::LeaveOut(_)));
    while !matches!(next_run(&mut h, &c), Verdict::Probe(_)) {}
    // A probe that pays (4 cycles at τ 4) reverses it.
    record(&mut h, run(4, 16), &c);
    assert_eq!(h.left_out, 0);
    assert_eq!(h.observed.map(|o| o.runs), Some(1));
    assert_eq!(next_run(&mut h, &c), Verdict::Load);
}

#[test]
fn a_verdict_on_costs_alone_is_probed_too() {
    // Lavapipe-like with a drafter of two drafts: a verify of 3 rows 1.93 steps, a draft
    // 1.09: not even every draft accepted pays.
    let lavapipe = CycleCosts {
        step: 0.0586,
        draft: 0.0639,
        inject: 0.0002,
        verify: 0.1131,
        verify_rows: 3,
    };
    let mut h = History::default();
    let Verdict::LeaveOut(why) = next_run(&mut h, &lavapipe) else {
        panic!("left out on costs");
    };
    assert_eq!(why.observed, None);
    while !matches!(next_run(&mut h, &lavapipe), Verdict::Probe(_)) {}
    // The probe measured the costs again (a quieter machine): they pay, and so does the probe.
    let measured = close_costs();
    record(&mut h, run(4, 12), &measured);
    assert_eq!(next_run(&mut h, &measured), Verdict::Load);
}

#[test]
fn the_verify_is_charged_at_the_rows_the_policy_runs() {
    let c = close_costs();
    // Linear between a plain step (1 row) and the full verify (8 rows).
    let half = charged_costs(&c, 4.5, None);
    assert!(
        (half.verify - (c.step + c.verify) / 2.0).abs() < 1e-12,
        "{half:?}"
    );
    assert_eq!(half.verify_rows, 5);
    assert_eq!(charged_costs(&c, 8.0, None), c);
    assert_eq!(charged_costs(&c, 99.0, None), c);
    // From the SPS(B) step times where they cover the block.
    let secs: Vec<f64> = (1..=8).map(|b| 0.05 + 0.001 * f64::from(b * b)).collect();
    let three = charged_costs(&c, 3.0, Some(&secs));
    assert!((three.verify - secs[2]).abs() < 1e-12);
    let mid = charged_costs(&c, 2.5, Some(&secs));
    assert!((mid.verify - (secs[1] + secs[2]) / 2.0).abs() < 1e-12);
    // The fixed policy verifies the block; the others the rows their cycles verified.
    let o = Observed {
        cycles: 10.0,
        committed: 20.0,
        verify_rows: 30.0,
        position: 0.0,
        runs: 1,
    };
    assert_eq!(policy_rows(true, 7, Some(&o)), 8.0);
    assert_eq!(policy_rows(false, 7, Some(&o)), 3.0);
    assert_eq!(policy_rows(false, 7, None), 8.0);
    // A threshold drafter accepting τ 1.9 on 3 rows pays where the full block would not.
    let h = History {
        observed: Some(Observed {
            cycles: 64.0,
            committed: 64.0 * 1.9,
            verify_rows: 64.0 * 3.0,
            position: 0.0,
            runs: 4,
        }),
        ..History::default()
    };
    let config = BypassConfig::default();
    assert!(matches!(
        decide(&fixed(&c), &h, config),
        Verdict::LeaveOut(_)
    ));
    let threshold = Profile {
        fixed: false,
        ..fixed(&c)
    };
    assert_eq!(decide(&threshold, &h, config), Verdict::Load);
}

#[test]
fn a_cycle_is_charged_at_the_depth_the_runs_drafted_at() {
    let c = close_costs();
    // At position 512 a step costs 1.5× and a full verify 2× what they cost at 0.
    let deep = DeepCosts {
        pos: 512,
        step: c.step * 1.5,
        verify: c.verify * 2.0,
    };
    let at = deep.at(&c, c.verify, 256.0);
    assert!((at.step - c.step * 1.25).abs() < 1e-12, "{at:?}");
    assert!((at.verify - c.verify * 1.5).abs() < 1e-12, "{at:?}");
    assert_eq!(deep.at(&c, c.verify, 0.0), c);
    // Friendly runs at τ 2.1: they pay near the start, not where they drafted 1000 rows deep.
    let observed = |position: f64| Observed {
        cycles: 64.0,
        committed: 64.0 * 2.1,
        verify_rows: 64.0 * 8.0,
        position: 64.0 * position,
        runs: 4,
    };
    let profile = Profile {
        deep: Some(deep),
        ..fixed(&c)
    };
    let config = BypassConfig::default();
    let at = |p: f64| History {
        observed: Some(observed(p)),
        ..History::default()
    };
    assert_eq!(decide(&profile, &at(10.0), config), Verdict::Load);
    assert!(matches!(
        decide(&profile, &at(1000.0), config),
        Verdict::LeaveOut(_)
    ));
    // Recorded runs keep their mean position under the decaying weights.
    let mut h = History::default();
    let r = |position| RunObserved {
        position,
        ..run(32, 64)
    };
    record_run(&mut h, r(100.0), &profile, &config);
    record_run(&mut h, r(300.0), &profile, &config);
    let p = h.observed.unwrap().mean_position();
    assert!(p > 200.0 && p < 300.0, "{p}");
}
