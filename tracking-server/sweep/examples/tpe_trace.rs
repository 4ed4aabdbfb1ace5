//! Runs TPE sequentially on a benchmark function and prints, as JSON lines, each trial's value and
//! the best value so far: `tpe_trace --function branin|hartmann6 --seed S --trials N`.
//! Optional: `--candidates N`, `--startup N`, `--gamma F`, `--max-good N`, `--prior-weight F`,
//! `--univariate`, to compare settings.

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

struct Options {
    function: String,
    seed: u64,
    trials: usize,
    settings: TpeSettings,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options { function: String::new(), seed: 0, trials: 100, settings: TpeSettings::default() };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        if flag == "--scott" {
            options.settings.scott = true;
            continue;
        }
        if flag == "--univariate" {
            options.settings.multivariate = false;
            continue;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |_| format!("{flag}: cannot read {value:?}");
        match flag.as_str() {
            "--function" => options.function = value.clone(),
            "--seed" => options.seed = value.parse().map_err(|e: std::num::ParseIntError| bad(e.to_string()))?,
            "--trials" => options.trials = value.parse().map_err(|e: std::num::ParseIntError| bad(e.to_string()))?,
            "--candidates" => {
                options.settings.n_candidates =
                    value.parse().map_err(|e: std::num::ParseIntError| bad(e.to_string()))?
            }
            "--startup" => {
                options.settings.n_startup = value.parse().map_err(|e: std::num::ParseIntError| bad(e.to_string()))?
            }
            "--max-good" => {
                options.settings.max_good = value.parse().map_err(|e: std::num::ParseIntError| bad(e.to_string()))?
            }
            "--bw-scale" => {
                options.settings.bandwidth_scale =
                    value.parse().map_err(|e: std::num::ParseFloatError| bad(e.to_string()))?
            }
            "--floor-cap" => {
                options.settings.floor_divisor_cap =
                    value.parse().map_err(|e: std::num::ParseFloatError| bad(e.to_string()))?
            }
            "--rank-weights" => {
                options.settings.rank_weights =
                    value.parse().map_err(|e: std::num::ParseFloatError| bad(e.to_string()))?
            }
            "--floor-total" => options.settings.floor_total = value == "1",
            "--gamma" => {
                options.settings.gamma = value.parse().map_err(|e: std::num::ParseFloatError| bad(e.to_string()))?
            }
            "--prior-weight" => {
                options.settings.prior_weight =
                    value.parse().map_err(|e: std::num::ParseFloatError| bad(e.to_string()))?
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
    let (dimensions, objective, low, high): (usize, fn(&[f64]) -> f64, Vec<f64>, Vec<f64>) =
        match options.function.as_str() {
            "branin" => (2, branin, vec![-5.0, 0.0], vec![10.0, 15.0]),
            "hartmann6" => (6, hartmann6, vec![0.0; 6], vec![1.0; 6]),
            other => {
                eprintln!("tpe_trace: --function must be branin or hartmann6, not {other:?}");
                return ExitCode::from(2);
            }
        };
    let names: Vec<String> = (1..=dimensions).map(|i| format!("x{i}")).collect();
    let space = match Space::new(
        names
            .iter()
            .zip(low.iter().zip(&high))
            .map(|(name, (&min, &max))| (name.clone(), Distribution::Uniform { min, max })),
    ) {
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
