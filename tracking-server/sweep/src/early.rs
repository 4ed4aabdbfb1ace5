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
    let brackets = hyperband_brackets(min_steps, max_steps, eta);
    let total: u128 = brackets.iter().map(|b| u128::from(b.trials)).sum();
    // The fractional part of trial_index × (√5 − 1) / 2, with 32 bits of precision.
    let fraction = u128::from(trial_index.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32);
    let target = fraction * total;
    let mut cumulative: u128 = 0;
    for (i, bracket) in brackets.iter().enumerate() {
        cumulative += u128::from(bracket.trials);
        if target < cumulative << 32 {
            return Some(i);
        }
    }
    Some(brackets.len().saturating_sub(1))
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

/// The rungs at which the `trial_index`-th trial is judged: ASHA's `min_steps · eta^k`, its
/// Hyperband bracket's `min_steps · eta^k`, always below `max_steps`; none for the other rules.
pub fn rung_steps(rule: &Rule, trial_index: u64) -> Vec<i64> {
    match *rule {
        Rule::Asha { min_steps, max_steps, eta } => ladder(min_steps, max_steps, eta),
        Rule::Hyperband { min_steps, max_steps, eta } => {
            let brackets = hyperband_brackets(min_steps, max_steps, eta);
            match bracket_of(rule, trial_index).and_then(|b| brackets.get(b)) {
                Some(bracket) => ladder(bracket.min_steps, max_steps, eta),
                None => Vec::new(),
            }
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
        Rule::Hyperband { max_steps, eta, .. } => {
            let bracket = bracket_of(rule, trial.trial_index);
            let same_bracket = others().filter(|peer| bracket_of(rule, peer.trial_index) == bracket);
            successive_halving(&rung_steps(rule, trial.trial_index), max_steps, eta, trial, same_bracket)
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
