//! Histograms logged per step (counts over bin edges, binned as numpy bins them) and how a
//! logged table part joins the table before it.

use crate::limits::MAX_HISTOGRAM_BINS;
use crate::{Error, MetricKey, Result};

/// One histogram of a run: `counts[i]` values fell in `[edges[i], edges[i + 1])`, the last bin
/// closed on the right.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    pub key: MetricKey,
    pub step: i64,
    pub edges: Vec<f64>,
    pub counts: Vec<f64>,
    pub timestamp_ms: i64,
}

impl Histogram {
    /// Bins `values` into `bins` equal bins between their least and greatest finite value, with
    /// the same edges and counts as `numpy.histogram(values, bins)`. Values that are not finite
    /// are left out (numpy refuses them); no values bin as numpy bins an empty array, over [0, 1].
    pub fn bin(values: &[f64], bins: usize) -> (Vec<f64>, Vec<f64>) {
        let bins = bins.max(1);
        let finite = || values.iter().copied().filter(|v| v.is_finite());
        let (mut first, mut last) =
            finite().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if first > last {
            (first, last) = (0.0, 1.0);
        }
        if first == last {
            first -= 0.5;
            last += 0.5;
        }
        // numpy.linspace: start + i * step, with the last edge set to stop exactly.
        let step = (last - first) / bins as f64;
        let mut edges: Vec<f64> = (0..=bins).map(|i| i as f64 * step + first).collect();
        edges[bins] = last;
        let mut counts = vec![0.0; bins];
        let denom = last - first;
        for v in finite() {
            let mut i = ((v - first) / denom * bins as f64) as usize;
            if i == bins {
                i -= 1;
            }
            if v < edges[i] {
                i = i.saturating_sub(1);
            } else if v >= edges[i + 1] && i != bins - 1 {
                i += 1;
            }
            counts[i] += 1.0;
        }
        (edges, counts)
    }

    /// Checks the shape: `edges` one longer than `counts`, at most [`MAX_HISTOGRAM_BINS`] bins,
    /// edges finite and increasing, counts finite and not negative. `field` names the histogram.
    pub fn check(&self, field: &str) -> Result<()> {
        if self.step < 0 {
            return Err(Error::new(format!("{field}.step"), "a step is 0 or more"));
        }
        if self.counts.is_empty() || self.counts.len() > MAX_HISTOGRAM_BINS {
            return Err(Error::new(
                format!("{field}.counts"),
                format!("a histogram has 1 to {MAX_HISTOGRAM_BINS} bins, got {}", self.counts.len()),
            ));
        }
        if self.edges.len() != self.counts.len() + 1 {
            return Err(Error::new(
                format!("{field}.edges"),
                format!("{} counts need {} edges, got {}", self.counts.len(), self.counts.len() + 1, self.edges.len()),
            ));
        }
        if self.edges.iter().any(|e| !e.is_finite()) || self.edges.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::new(format!("{field}.edges"), "edges are finite numbers, strictly increasing"));
        }
        if self.counts.iter().any(|c| !c.is_finite() || *c < 0.0) {
            return Err(Error::new(format!("{field}.counts"), "counts are finite numbers, 0 or more"));
        }
        Ok(())
    }
}

/// How a logged part of a table joins what was logged under its key before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TableMode {
    /// The part is the whole table from its step on.
    #[default]
    Replace,
    /// The part's rows follow the rows of the table so far.
    Append,
}

impl TableMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Replace => "replace",
            Self::Append => "append",
        }
    }

    pub fn parse(field: &str, s: &str) -> Result<Self> {
        match s {
            "replace" => Ok(Self::Replace),
            "append" => Ok(Self::Append),
            _ => Err(Error::new(field, format!("a table's mode is replace or append, got {s:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_bin_as_numpy_bins_them() {
        // numpy.histogram([0, 1, 1, 2, 3, 10], bins=4): edges 0, 2.5, 5, 7.5, 10; counts 4, 1, 0, 1.
        let (edges, counts) = Histogram::bin(&[0.0, 1.0, 1.0, 2.0, 3.0, 10.0, f64::NAN], 4);
        assert_eq!(edges, vec![0.0, 2.5, 5.0, 7.5, 10.0]);
        assert_eq!(counts, vec![4.0, 1.0, 0.0, 1.0], "the last bin is closed; NaN is left out");
        let (edges, counts) = Histogram::bin(&[3.0, 3.0], 2);
        assert_eq!((edges, counts), (vec![2.5, 3.0, 3.5], vec![0.0, 2.0]));
        let (edges, counts) = Histogram::bin(&[], 2);
        assert_eq!((edges, counts), (vec![0.0, 0.5, 1.0], vec![0.0, 0.0]));
    }

    #[test]
    fn a_histogram_of_the_wrong_shape_is_refused_naming_the_field() {
        let h = |edges: Vec<f64>, counts: Vec<f64>| Histogram {
            key: MetricKey::parse("key", "w").unwrap(),
            step: 0,
            edges,
            counts,
            timestamp_ms: 0,
        };
        assert!(h(vec![0.0, 1.0], vec![2.0]).check("histograms[0]").is_ok());
        assert_eq!(h(vec![0.0, 1.0], vec![2.0, 1.0]).check("h").unwrap_err().field, "h.edges");
        assert_eq!(h(vec![1.0, 0.0], vec![2.0]).check("h").unwrap_err().field, "h.edges");
        assert_eq!(h(vec![0.0, 1.0], vec![-1.0]).check("h").unwrap_err().field, "h.counts");
        assert_eq!(h(vec![0.0], vec![]).check("h").unwrap_err().field, "h.counts");
        assert_eq!(TableMode::parse("mode", "append").unwrap(), TableMode::Append);
        assert!(TableMode::parse("mode", "merge").is_err());
    }
}
