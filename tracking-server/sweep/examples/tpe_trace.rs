//! Runs TPE sequentially on a benchmark function and prints, as JSON lines, each trial's value and
//! the best value so far: `tpe_trace --function branin|hartmann6 --seed S --trials N`.
//! To compare settings: `--candidates N`, `--startup N`, `--gamma F`, `--max-good N`,
//! `--prior-weight F`, `--bandwidth-factor F`, `--group-floor`, `--univariate`, and
//! `--optuna-settings` (the bandwidth rule of Optuna's TPESampler).

use serde_json::{json, Value};
use std::process::ExitCode;
use trainlog_sweep::space::{Distribution, Observation, Params, Space};
use trainlog_sweep::tpe::{suggest, TpeSettings};

const HARTMANN6_ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];
const HARTMANN6_A: [[f64; 6]; 4] = [
    [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
    [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
    [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
    [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
];
const HARTMANN6_P: [[f64; 6]; 4] = [
    [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
    [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
    [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
    [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
];

/// Branin on x1 in [-5, 10], x2 in [0, 15]; global minimum 0.397887.
fn branin(x: &[f64]) -> f64 {
    let pi = std::f64::consts::PI;
    let (b, c, t) = (5.1 / (4.0 * pi * pi), 5.0 / pi, 1.0 / (8.0 * pi));
    (x[1] - b * x[0] * x[0] + c * x[0] - 6.0).powi(2) + 10.0 * (1.0 - t) * x[0].cos() + 10.0
}

/// Hartmann6 on [0, 1]^6; global minimum -3.32237.
fn hartmann6(x: &[f64]) -> f64 {
    -(0..4)
        .map(|i| {
            let exponent: f64 = (0..6).map(|j| HARTMANN6_A[i][j] * (x[j] - HARTMANN6_P[i][j]).powi(2)).sum();
            HARTMANN6_ALPHA[i] * (-exponent).exp()
        })
        .sum::<f64>()
}

type Objective = fn(&[f64]) -> f64;

struct Options {
    function: String,
    seed: u64,
    trials: usize,
    settings: TpeSettings,
}

fn parse(args: &[String]) -> Result<Options, String> {
    fn number<T: std::str::FromStr>(flag: &str, value: Option<&String>) -> Result<T, String> {
        let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
        value.parse().map_err(|_| format!("{flag}: cannot read {value:?}"))
    }
    let mut options = Options { function: String::new(), seed: 0, trials: 100, settings: TpeSettings::default() };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let settings = &mut options.settings;
        match flag.as_str() {
            "--function" => options.function = args.next().ok_or("--function needs a value")?.clone(),
            "--seed" => options.seed = number(flag, args.next())?,
            "--trials" => options.trials = number(flag, args.next())?,
            "--candidates" => settings.n_candidates = number(flag, args.next())?,
            "--startup" => settings.n_startup = number(flag, args.next())?,
            "--gamma" => settings.gamma = number(flag, args.next())?,
            "--max-good" => settings.max_good = number(flag, args.next())?,
            "--prior-weight" => settings.prior_weight = number(flag, args.next())?,
            "--bandwidth-factor" => settings.bandwidth_factor = number(flag, args.next())?,
            "--univariate" => settings.multivariate = false,
            "--group-floor" => settings.floor_from_history = false,
            "--optuna-settings" => {
                let optuna = TpeSettings::optuna();
                settings.bandwidth_factor = optuna.bandwidth_factor;
                settings.floor_from_history = optuna.floor_from_history;
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse(&args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("tpe_trace: {message}");
            return ExitCode::from(2);
        }
    };
    let (objective, bounds): (Objective, Vec<(f64, f64)>) = match options.function.as_str() {
        "branin" => (branin, vec![(-5.0, 10.0), (0.0, 15.0)]),
        "hartmann6" => (hartmann6, vec![(0.0, 1.0); 6]),
        other => {
            eprintln!("tpe_trace: --function must be branin or hartmann6, not {other:?}");
            return ExitCode::from(2);
        }
    };
    let names: Vec<String> = (1..=bounds.len()).map(|i| format!("x{i}")).collect();
    let distributions =
        names.iter().zip(&bounds).map(|(name, &(min, max))| (name.clone(), Distribution::Uniform { min, max }));
    let space = match Space::new(distributions) {
        Ok(space) => space,
        Err(error) => {
            eprintln!("tpe_trace: {error}");
            return ExitCode::from(1);
        }
    };

    let mut history: Vec<Observation> = Vec::with_capacity(options.trials);
    let mut best = f64::INFINITY;
    for trial in 0..options.trials {
        let params: Params = suggest(&space, &history, options.seed, trial as u64, &options.settings);
        let x: Vec<f64> =
            names.iter().map(|name| params.get(name).and_then(Value::as_f64).unwrap_or(f64::NAN)).collect();
        let value = objective(&x);
        best = best.min(value);
        println!("{}", json!({"trial": trial, "value": value, "best": best, "params": params}));
        history.push(Observation { params, loss: Some(value) });
    }
    ExitCode::SUCCESS
}
