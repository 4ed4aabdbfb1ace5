//! Early termination: whether a running trial should stop, decided from its metric so far and its
//! peers', as pure functions (ASHA, Hyperband, median stopping).
//!
//! Definitions shared by the rules (losses are already in the minimizing direction; a NaN loss
//! counts as the worst possible):
//! - A trial has *reached* step r once it has reported a point at a step ≥ r. Its *value at r* is
//!   then its last loss at a step ≤ r (none if it reported nothing up to r).
//! - A *rung* is a step where successive halving compares trials. ASHA's rungs are
//!   `min_steps · eta^k` below `max_steps`; a Hyperband bracket's rungs are its own
//!   `min_steps · eta^k` below `max_steps`. No trial is ever stopped at or past `max_steps`.
//! - ASHA: at the highest rung a trial has reached, it continues only if its value is among the
//!   top ⌊n / eta⌋ (at least 1) of the n trials, itself included, that have a value there; ties
//!   keep. The decision is taken again on every call, so a trial kept while few peers had reached
//!   its rung can be stopped there later when better ones arrive.
//! - Hyperband: the same successive halving, but among the trials of the trial's bracket only,
//!   at the bracket's rungs.
//! - Median: once a trial has reached `min_steps`, it stops when its best loss so far is worse
//!   than the median of the values, at its current step, of the peers that reached that step.
//!
//! Hyperband brackets: trials are dealt to brackets in proportion to each bracket's trial budget
//! (81, 34, 15, 8 and 5 out of 143 for R = 81, η = 3), interleaved rather than filled one after
//! the other: trial i goes to the bracket whose share of [0, 1) contains the fractional part of
//! i × 0.618… (the golden ratio's Weyl sequence). Every bracket thus gets trials from the start of
//! a sweep of any length, in Hyperband's proportions, and a trial's bracket depends on its index
//! alone.

/// An early-termination rule, as written in the sweep file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Rule {
    /// Trials always run to the end.
    #[default]
    None,
    /// Asynchronous successive halving over one ladder of rungs.
    Asha { min_steps: i64, max_steps: i64, eta: u32 },
    /// Several successive-halving brackets, from aggressive (first rung at `min_steps`) to none.
    Hyperband { min_steps: i64, max_steps: i64, eta: u32 },
    /// Stop trials worse than the median of their peers at the same step.
    Median { min_steps: i64 },
}

/// One Hyperband bracket: how many trials it is meant to start per round, and its first rung.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bracket {
    pub trials: u64,
    pub min_steps: i64,
}

/// A trial's metric so far: (step, loss) points sorted by step, losses in the minimizing direction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Progress {
    pub trial_index: u64,
    pub points: Vec<(i64, f64)>,
}

/// What to do with a running trial.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Continue,
    /// Stop the trial: it was judged at step `rung` (its rung, or its current step for the median
    /// rule), for the `reason` given.
    Stop {
        rung: i64,
        reason: String,
    },
}

/// A loss ordered for comparisons: NaN (a diverged trial) is the worst.
fn comparable(loss: f64) -> f64 {
    if loss.is_nan() {
        f64::INFINITY
    } else {
        loss
    }
}

impl Progress {
    /// The last step reported, if any.
    pub fn last_step(&self) -> Option<i64> {
        self.points.iter().map(|&(step, _)| step).max()
    }

    /// The trial's value at step `step`: its last loss at a step ≤ `step`, once it has reported a
    /// step ≥ `step`; None before that, or when it reported nothing up to `step`.
    pub fn value_at(&self, step: i64) -> Option<f64> {
        if self.last_step()? < step {
            return None;
        }
        // Points are sorted by step; on a repeated step the later point wins.
        self.points.iter().filter(|&&(s, _)| s <= step).max_by_key(|&&(s, _)| s).map(|&(_, loss)| comparable(loss))
    }

    /// The lowest loss reported at a step ≤ `step`.
    pub fn best_until(&self, step: i64) -> Option<f64> {
        self.points.iter().filter(|&&(s, _)| s <= step).map(|&(_, loss)| comparable(loss)).reduce(f64::min)
    }
}

/// Hyperband's brackets for a maximum of R = `max_steps` steps and a first rung r = `min_steps`,
/// most aggressive first. With s_max = ⌊log_η(R / r)⌋, bracket s (from s_max down to 0) starts
/// n = ⌈(s_max + 1) / (s + 1) · η^s⌉ trials at r_s = ⌊R · η^-s⌋ steps. For R = 81, r = 1, η = 3:
/// 81 trials at 1, 34 at 3, 15 at 9, 8 at 27, 5 at 81. Degenerate settings (η < 2, R ≤ r) give one
/// bracket whose trials all run to `max_steps`.
pub fn hyperband_brackets(min_steps: i64, max_steps: i64, eta: u32) -> Vec<Bracket> {
    let min_steps = min_steps.max(1);
    if eta < 2 || max_steps <= min_steps {
        return vec![Bracket { trials: 1, min_steps: max_steps.max(min_steps) }];
    }
    let eta = i128::from(eta);
    let (min_steps_wide, max_steps_wide) = (i128::from(min_steps), i128::from(max_steps));
    let mut s_max: u32 = 0;
    while min_steps_wide * eta.pow(s_max + 1) <= max_steps_wide {
        s_max += 1;
    }
    (0..=s_max)
        .rev()
        .map(|s| {
            let power = eta.pow(s);
            let trials = (i128::from(s_max + 1) * power + i128::from(s)) / i128::from(s + 1);
            Bracket {
                trials: u64::try_from(trials).unwrap_or(u64::MAX),
                min_steps: ((max_steps_wide / power) as i64).max(min_steps),
            }
        })
        .collect()
}

/// The Hyperband bracket (an index into `hyperband_brackets`) of the `trial_index`-th trial; None
/// for other rules. See the module documentation for how trials are dealt.
pub fn bracket_of(rule: &Rule, trial_index: u64) -> Option<usize> {
    let Rule::Hyperband { min_steps, max_steps, eta } = *rule else {
        return None;
    };
    Some(bracket_index(&hyperband_brackets(min_steps, max_steps, eta), trial_index))
}

/// The bracket whose share of [0, 1) holds the fractional part of trial_index × (√5 − 1) / 2
/// (computed with 32 bits of precision, in integers).
fn bracket_index(brackets: &[Bracket], trial_index: u64) -> usize {
    let total: u128 = brackets.iter().map(|b| u128::from(b.trials)).sum();
    let fraction = u128::from(trial_index.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32);
    let target = fraction * total;
    let mut cumulative: u128 = 0;
    for (i, bracket) in brackets.iter().enumerate() {
        cumulative += u128::from(bracket.trials);
        if target < cumulative << 32 {
            return i;
        }
    }
    brackets.len().saturating_sub(1)
}

/// The steps `first · eta^k` below `max_steps`.
fn ladder(first: i64, max_steps: i64, eta: u32) -> Vec<i64> {
    let mut rungs = Vec::new();
    if eta < 2 {
        return rungs;
    }
    let mut rung = first.max(1);
    while rung < max_steps {
        rungs.push(rung);
        match rung.checked_mul(i64::from(eta)) {
            Some(next) => rung = next,
            None => break,
        }
    }
    rungs
}

fn bracket_rungs(brackets: &[Bracket], bracket: usize, max_steps: i64, eta: u32) -> Vec<i64> {
    brackets.get(bracket).map_or_else(Vec::new, |b| ladder(b.min_steps, max_steps, eta))
}

/// The rungs at which the `trial_index`-th trial is judged: ASHA's `min_steps · eta^k`, its
/// Hyperband bracket's `min_steps · eta^k`, always below `max_steps`; none for the other rules.
pub fn rung_steps(rule: &Rule, trial_index: u64) -> Vec<i64> {
    match *rule {
        Rule::Asha { min_steps, max_steps, eta } => ladder(min_steps, max_steps, eta),
        Rule::Hyperband { min_steps, max_steps, eta } => {
            let brackets = hyperband_brackets(min_steps, max_steps, eta);
            bracket_rungs(&brackets, bracket_index(&brackets, trial_index), max_steps, eta)
        }
        Rule::None | Rule::Median { .. } => Vec::new(),
    }
}

/// Whether `trial` should stop now, given the other trials of the sweep (`peers`, finished or
/// running; an entry with the trial's own index is ignored). See the module documentation.
pub fn decide(rule: &Rule, trial: &Progress, peers: &[Progress]) -> Decision {
    let others = || peers.iter().filter(|peer| peer.trial_index != trial.trial_index);
    match *rule {
        Rule::None => Decision::Continue,
        Rule::Asha { max_steps, eta, .. } => {
            successive_halving(&rung_steps(rule, trial.trial_index), max_steps, eta, trial, others())
        }
        Rule::Hyperband { min_steps, max_steps, eta } => {
            let brackets = hyperband_brackets(min_steps, max_steps, eta);
            let bracket = bracket_index(&brackets, trial.trial_index);
            let rungs = bracket_rungs(&brackets, bracket, max_steps, eta);
            let same_bracket = others().filter(|peer| bracket_index(&brackets, peer.trial_index) == bracket);
            successive_halving(&rungs, max_steps, eta, trial, same_bracket)
        }
        Rule::Median { min_steps } => median_stopping(min_steps, trial, others()),
    }
}

fn successive_halving<'a>(
    rungs: &[i64],
    max_steps: i64,
    eta: u32,
    trial: &Progress,
    peers: impl Iterator<Item = &'a Progress>,
) -> Decision {
    let Some(current) = trial.last_step() else {
        return Decision::Continue;
    };
    if current >= max_steps || eta < 2 {
        return Decision::Continue;
    }
    let Some(&rung) = rungs.iter().rev().find(|&&rung| rung <= current) else {
        return Decision::Continue;
    };
    let Some(value) = trial.value_at(rung) else {
        return Decision::Continue;
    };
    let peer_values: Vec<f64> = peers.filter_map(|peer| peer.value_at(rung)).collect();
    let reached = peer_values.len() + 1;
    let kept = (reached / eta as usize).max(1);
    let better = peer_values.iter().filter(|&&peer| peer < value).count();
    if better < kept {
        Decision::Continue
    } else {
        Decision::Stop {
            rung,
            reason: format!(
                "loss {value} at step {rung} is not among the best {kept} of the {reached} trials that reached it ({better} did better)"
            ),
        }
    }
}

fn median_stopping<'a>(min_steps: i64, trial: &Progress, peers: impl Iterator<Item = &'a Progress>) -> Decision {
    let Some(current) = trial.last_step() else {
        return Decision::Continue;
    };
    if current < min_steps {
        return Decision::Continue;
    }
    let Some(best) = trial.best_until(current) else {
        return Decision::Continue;
    };
    let mut peer_values: Vec<f64> = peers.filter_map(|peer| peer.value_at(current)).collect();
    if peer_values.is_empty() {
        return Decision::Continue;
    }
    peer_values.sort_by(f64::total_cmp);
    let middle = peer_values.len() / 2;
    let median = if peer_values.len() % 2 == 1 {
        peer_values[middle]
    } else {
        (peer_values[middle - 1] + peer_values[middle]) / 2.0
    };
    if best > median {
        Decision::Stop {
            rung: current,
            reason: format!(
                "best loss {best} by step {current} is worse than the median {median} of the {} other trials at that step",
                peer_values.len()
            ),
        }
    } else {
        Decision::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(trial_index: u64, points: &[(i64, f64)]) -> Progress {
        Progress { trial_index, points: points.to_vec() }
    }

    fn stopped_at(decision: &Decision) -> Option<i64> {
        match decision {
            Decision::Stop { rung, .. } => Some(*rung),
            Decision::Continue => None,
        }
    }

    const ASHA: Rule = Rule::Asha { min_steps: 1, max_steps: 81, eta: 3 };
    const HYPERBAND: Rule = Rule::Hyperband { min_steps: 1, max_steps: 81, eta: 3 };

    #[test]
    fn hyperband_bracket_table() {
        let table = |brackets: Vec<Bracket>| brackets.iter().map(|b| (b.trials, b.min_steps)).collect::<Vec<_>>();
        // R = 81, r = 1, η = 3: s_max = log3(81) = 4.
        // s = 4: n = ⌈5/5 · 81⌉ = 81, r = 81/81 = 1
        // s = 3: n = ⌈5/4 · 27⌉ = ⌈33.75⌉ = 34, r = 81/27 = 3
        // s = 2: n = ⌈5/3 · 9⌉ = 15, r = 9
        // s = 1: n = ⌈5/2 · 3⌉ = ⌈7.5⌉ = 8, r = 27
        // s = 0: n = ⌈5/1 · 1⌉ = 5, r = 81
        assert_eq!(table(hyperband_brackets(1, 81, 3)), vec![(81, 1), (34, 3), (15, 9), (8, 27), (5, 81)]);
        // R = 100, r = 2, η = 3: 2 · 27 = 54 <= 100 < 162, so s_max = 3.
        // n: ⌈4/4 · 27⌉ = 27, ⌈4/3 · 9⌉ = 12, ⌈4/2 · 3⌉ = 6, ⌈4/1⌉ = 4; r = ⌊100/27⌋ = 3, ⌊100/9⌋ = 11, 33, 100.
        assert_eq!(table(hyperband_brackets(2, 100, 3)), vec![(27, 3), (12, 11), (6, 33), (4, 100)]);
        // Degenerate settings: one bracket that runs every trial to the end.
        assert_eq!(table(hyperband_brackets(5, 5, 3)), vec![(1, 5)]);
        assert_eq!(table(hyperband_brackets(1, 81, 1)), vec![(1, 81)]);
        assert_eq!(hyperband_brackets(1, i64::MAX, 2).len(), 63);
    }

    #[test]
    fn rungs_per_rule() {
        assert_eq!(rung_steps(&ASHA, 0), vec![1, 3, 9, 27], "81 is max_steps: no decision there");
        assert_eq!(rung_steps(&Rule::Asha { min_steps: 2, max_steps: 50, eta: 2 }, 7), vec![2, 4, 8, 16, 32]);
        assert_eq!(rung_steps(&Rule::Asha { min_steps: 1, max_steps: i64::MAX, eta: 100 }, 0).len(), 10);
        assert_eq!(rung_steps(&Rule::Asha { min_steps: 1, max_steps: 81, eta: 1 }, 0), Vec::<i64>::new());
        // Trials 0, 1, 3, 8 and 21 fall in brackets 0 to 4 (see bracket_assignment_interleaves).
        assert_eq!(rung_steps(&HYPERBAND, 0), vec![1, 3, 9, 27]);
        assert_eq!(rung_steps(&HYPERBAND, 1), vec![3, 9, 27]);
        assert_eq!(rung_steps(&HYPERBAND, 3), vec![9, 27]);
        assert_eq!(rung_steps(&HYPERBAND, 8), vec![27]);
        assert_eq!(rung_steps(&HYPERBAND, 21), Vec::<i64>::new());
        assert_eq!(rung_steps(&Rule::Median { min_steps: 3 }, 0), Vec::<i64>::new());
        assert_eq!(rung_steps(&Rule::None, 0), Vec::<i64>::new());
    }

    #[test]
    fn bracket_assignment_interleaves_in_hyperband_proportions() {
        // Shares of 143 trials: 81, 34, 15, 8, 5, i.e. bracket boundaries at 0.566, 0.804, 0.909,
        // 0.965. Trial i goes where frac(i × 0.618034) falls: 0 → 0, 0.618 → 1, 0.236 → 0,
        // 0.854 → 2, 0.472 → 0, 0.090 → 0, 0.708 → 1, 0.326 → 0, 0.944 → 3, ..., 21 × 0.618 = 12.979 → 4.
        let first: Vec<usize> = (0..22).map(|i| bracket_of(&HYPERBAND, i).unwrap()).collect();
        assert_eq!(first, vec![0, 1, 0, 2, 0, 0, 1, 0, 3, 0, 0, 1, 0, 0, 1, 0, 2, 0, 0, 1, 0, 4]);
        let mut counts = [0u64; 5];
        for i in 0..143 * 20 {
            counts[bracket_of(&HYPERBAND, i).unwrap()] += 1;
        }
        for (count, share) in counts.iter().zip([81, 34, 15, 8, 5]) {
            assert!(count.abs_diff(share * 20) <= 20, "{counts:?}");
        }
        assert_eq!(bracket_of(&ASHA, 3), None);
        assert_eq!(bracket_of(&Rule::None, 3), None);
        assert_eq!(bracket_of(&Rule::Hyperband { min_steps: 9, max_steps: 9, eta: 3 }, 5), Some(0));
    }

    #[test]
    fn values_at_a_step() {
        let p = progress(0, &[(1, 0.9), (2, 0.1), (4, 0.05), (4, 0.04)]);
        assert_eq!(p.last_step(), Some(4));
        assert_eq!(p.value_at(3), Some(0.1), "last loss at a step <= 3");
        assert_eq!(p.value_at(4), Some(0.04), "a repeated step: the later point");
        assert_eq!(p.value_at(5), None, "not reached yet");
        assert_eq!(progress(0, &[(5, 0.1)]).value_at(3), None, "nothing reported up to step 3");
        assert_eq!(p.best_until(1), Some(0.9));
        assert_eq!(p.best_until(4), Some(0.04));
        assert_eq!(progress(0, &[(1, f64::NAN)]).value_at(1), Some(f64::INFINITY));
        assert_eq!(Progress::default().last_step(), None);
    }

    #[test]
    fn asha_keeps_the_top_third_at_the_highest_rung_reached() {
        let trial = progress(0, &[(1, 0.9), (2, 0.8), (3, 0.7)]);
        let peers = [
            progress(1, &[(1, 0.5), (3, 0.4), (5, 0.3)]), // value at 3: 0.4
            progress(2, &[(1, 0.6), (3, 0.65)]),          // 0.65
            progress(3, &[(1, 0.95)]),                    // has not reached 3
            progress(4, &[(3, 0.2), (9, 0.1)]),           // 0.2
        ];
        // Rung 3 (the highest reached at step 3): n = 4 trials, keep ⌊4/3⌋ = 1; 3 did better than 0.7.
        assert_eq!(stopped_at(&decide(&ASHA, &trial, &peers)), Some(3));
        // Against trial 2 alone: n = 2, keep max(1, ⌊2/3⌋) = 1; 0.65 beats 0.7: stop. A 0.6 would stay.
        assert_eq!(stopped_at(&decide(&ASHA, &trial, &peers[1..3])), Some(3));
        let better = progress(0, &[(1, 0.9), (3, 0.6)]);
        assert_eq!(decide(&ASHA, &better, &peers[1..3]), Decision::Continue);
        // At step 2 the highest rung reached is 1: n = 4 (trials 0, 1, 2, 3), keep 1, 0.5 and 0.6 did better.
        let early = progress(0, &[(1, 0.9), (2, 0.8)]);
        assert_eq!(stopped_at(&decide(&ASHA, &early, &peers)), Some(1));
        // The best at rung 1 continues.
        assert_eq!(decide(&ASHA, &progress(0, &[(1, 0.1)]), &peers), Decision::Continue);
    }

    #[test]
    fn asha_top_count_grows_with_the_trials_at_the_rung_and_ties_keep() {
        let trial = progress(0, &[(9, 0.3)]);
        let mut peers: Vec<Progress> =
            [0.1, 0.5, 0.6, 0.7, 0.8].iter().enumerate().map(|(i, &v)| progress(i as u64 + 1, &[(9, v)])).collect();
        // Rung 9: n = 6, keep ⌊6/3⌋ = 2; only 0.1 did better (1 < 2): continue.
        assert_eq!(decide(&ASHA, &trial, &peers), Decision::Continue);
        // One more peer at 0.2: n = 7, keep ⌊7/3⌋ = 2; 0.1 and 0.2 did better: stop.
        peers.push(progress(9, &[(9, 0.2)]));
        assert_eq!(stopped_at(&decide(&ASHA, &trial, &peers)), Some(9));
        // Ties keep: n = 3, keep 1, nobody strictly better than 0.5.
        let tied = [progress(1, &[(1, 0.5)]), progress(2, &[(1, 0.5)])];
        assert_eq!(decide(&ASHA, &progress(0, &[(1, 0.5)]), &tied), Decision::Continue);
        // An entry with the trial's own index is not a peer.
        assert_eq!(decide(&ASHA, &progress(0, &[(1, 0.5)]), &[progress(0, &[(1, 0.1)])]), Decision::Continue);
    }

    #[test]
    fn asha_edge_cases() {
        let better_peers: Vec<Progress> = (1..10).map(|i| progress(i, &[(81, 0.0), (100, 0.0)])).collect();
        // Never stopped at or past max_steps.
        assert_eq!(decide(&ASHA, &progress(0, &[(81, 9.0)]), &better_peers), Decision::Continue);
        assert_eq!(decide(&ASHA, &progress(0, &[(100, 9.0)]), &better_peers), Decision::Continue);
        // Nothing reported, or not yet at the first rung.
        assert_eq!(decide(&ASHA, &progress(0, &[]), &better_peers), Decision::Continue);
        assert_eq!(decide(&ASHA, &progress(0, &[(0, 9.0)]), &better_peers), Decision::Continue);
        // Nothing reported up to the rung: no value to judge.
        assert_eq!(decide(&ASHA, &progress(0, &[(5, 9.0)]), &[progress(1, &[(3, 0.0)])]), Decision::Continue);
        // The value at rung 3 is the loss at step 2; the peer's later 0.01 does not count there.
        // n = 2, keep 1, the peer's 0.2 is worse than 0.1: continue.
        let trial = progress(0, &[(1, 0.9), (2, 0.1), (4, 0.05)]);
        assert_eq!(decide(&ASHA, &trial, &[progress(1, &[(3, 0.2), (4, 0.01)])]), Decision::Continue);
        // A NaN loss is the worst.
        assert_eq!(stopped_at(&decide(&ASHA, &progress(0, &[(1, f64::NAN)]), &[progress(1, &[(1, 5.0)])])), Some(1));
        // Alone at a rung: kept.
        assert_eq!(decide(&ASHA, &progress(0, &[(27, 9.0)]), &[]), Decision::Continue);
        assert_eq!(decide(&Rule::None, &progress(0, &[(27, 9.0)]), &better_peers), Decision::Continue);
        let Decision::Stop { reason, .. } = decide(&ASHA, &progress(0, &[(1, 0.9)]), &[progress(1, &[(1, 0.5)])])
        else {
            panic!("expected a stop");
        };
        assert!(reason.contains("step 1") && reason.contains("best 1 of the 2"), "{reason}");
    }

    #[test]
    fn hyperband_halves_within_the_bracket_only() {
        // Brackets (bracket_assignment_interleaves): trials 0, 2, 4 in bracket 0 (rungs 1, 3, 9, 27),
        // trials 1, 6 in bracket 1 (rungs 3, 9, 27), trial 21 in bracket 4 (no rung).
        let trial = progress(1, &[(1, 0.9), (3, 0.3)]);
        let peers =
            [progress(0, &[(3, 0.1)]), progress(2, &[(3, 0.2)]), progress(4, &[(3, 0.05)]), progress(6, &[(3, 0.4)])];
        // Bracket 1 at rung 3: trials 1 and 6, n = 2, keep 1, 0.4 is worse than 0.3: continue.
        assert_eq!(decide(&HYPERBAND, &trial, &peers), Decision::Continue);
        // ASHA compares all five: n = 5, keep 1, three did better: stop.
        assert_eq!(stopped_at(&decide(&ASHA, &trial, &peers)), Some(3));
        // Trial 0, bracket 0, at rung 3: trials 0, 2, 4: n = 3, keep 1, 0.05 (trial 4) did better: stop.
        assert_eq!(stopped_at(&decide(&HYPERBAND, &progress(0, &[(3, 0.1)]), &peers)), Some(3));
        // Bracket 1 has no rung at 1 or 2: a poor trial 1 at step 2 goes on.
        let early = progress(1, &[(1, 9.0), (2, 9.0)]);
        assert_eq!(decide(&HYPERBAND, &early, &[progress(6, &[(1, 0.1), (2, 0.1)])]), Decision::Continue);
        // Bracket 4 never stops.
        let all_better: Vec<Progress> = (22..40).map(|i| progress(i, &[(1, 0.0), (50, 0.0)])).collect();
        assert_eq!(decide(&HYPERBAND, &progress(21, &[(50, 9.0)]), &all_better), Decision::Continue);
    }

    #[test]
    fn median_stops_trials_worse_than_their_peers_median() {
        let rule = Rule::Median { min_steps: 5 };
        let trial = progress(0, &[(1, 1.0), (3, 0.8), (6, 0.7)]);
        let a = progress(1, &[(2, 0.9), (6, 0.5), (8, 0.4)]); // value at 6: 0.5
        let b = progress(2, &[(5, 0.6), (7, 0.55)]); // last loss at a step <= 6: 0.6
        let c = progress(3, &[(6, 0.9)]); // 0.9
        let d = progress(4, &[(4, 0.1)]); // has not reached step 6
                                          // Median of [0.5, 0.6, 0.9] = 0.6; the trial's best so far, 0.7, is worse: stop at step 6.
        assert_eq!(stopped_at(&decide(&rule, &trial, &[a.clone(), b.clone(), c.clone(), d.clone()])), Some(6));
        // Median of [0.5, 0.9] = 0.7: not worse (ties keep).
        assert_eq!(decide(&rule, &trial, &[a.clone(), c.clone(), d.clone()]), Decision::Continue);
        // The best so far counts, not the last loss: 0.3 at step 5 beats the median 0.6.
        let recovering = progress(0, &[(5, 0.3), (6, 0.9)]);
        assert_eq!(decide(&rule, &recovering, &[a.clone(), b.clone(), c.clone()]), Decision::Continue);
        // Before min_steps, or with no peer at the step: continue.
        assert_eq!(decide(&rule, &progress(0, &[(4, 9.0)]), &[a.clone(), b.clone()]), Decision::Continue);
        assert_eq!(decide(&rule, &trial, &[d]), Decision::Continue);
        let Decision::Stop { reason, .. } = decide(&rule, &trial, &[a, b, c]) else { panic!("expected a stop") };
        assert!(reason.contains("median 0.6") && reason.contains("3 other trials"), "{reason}");
    }
}
