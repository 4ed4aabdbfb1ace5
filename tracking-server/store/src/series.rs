//! One metric series in columns: merging layers with last-write-wins, step ranges,
//! downsampling into buckets that keep each bucket's min, max and last value, and the
//! reduction of many runs' series onto one step grid.

/// Points of one series sorted by step, one point per step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    pub steps: Vec<i64>,
    pub timestamps: Vec<i64>,
    pub values: Vec<f64>,
}

/// An inclusive step range; `None` bounds are open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepRange {
    pub min: Option<i64>,
    pub max: Option<i64>,
}

impl StepRange {
    pub fn contains(&self, step: i64) -> bool {
        self.min.is_none_or(|m| step >= m) && self.max.is_none_or(|m| step <= m)
    }
    pub fn overlaps(&self, lo: i64, hi: i64) -> bool {
        self.min.is_none_or(|m| hi >= m) && self.max.is_none_or(|m| lo <= m)
    }
}

/// One downsampled bucket: the steps it covers that hold points, the timestamps at those two
/// steps, their min and max (NaN ignored unless every value is NaN), the value at its highest
/// step, and how many points it holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub step_min: i64,
    pub step_max: i64,
    pub time_first: i64,
    pub time_last: i64,
    pub min: f64,
    pub max: f64,
    pub last: f64,
    pub count: u64,
}

impl Series {
    /// Bytes a point takes in a series: its step, timestamp and value.
    pub const BYTES_PER_POINT: usize = 24;

    pub fn len(&self) -> usize {
        self.steps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    pub fn push(&mut self, step: i64, timestamp: i64, value: f64) {
        self.steps.push(step);
        self.timestamps.push(timestamp);
        self.values.push(value);
    }

    pub fn heap_bytes(&self) -> usize {
        self.steps.capacity() * 8 + self.timestamps.capacity() * 8 + self.values.capacity() * 8
    }

    pub fn is_strictly_sorted(&self) -> bool {
        self.steps.windows(2).all(|w| w[0] < w[1])
    }

    /// Sorts points written in arrival order by step, keeping the newest write of each step: the
    /// one with the latest timestamp, and of those the last to arrive.
    pub fn normalize(&mut self) {
        if self.is_strictly_sorted() {
            return;
        }
        let mut order: Vec<u32> = (0..self.steps.len() as u32).collect();
        // Stable: the writes of one step stay in arrival order.
        order.sort_by_key(|&i| self.steps[i as usize]);
        let mut out = Series::default();
        out.steps.reserve(order.len());
        out.timestamps.reserve(order.len());
        out.values.reserve(order.len());
        let mut n = 0;
        while n < order.len() {
            let step = self.steps[order[n] as usize];
            let mut newest = order[n] as usize;
            n += 1;
            while n < order.len() && self.steps[order[n] as usize] == step {
                let i = order[n] as usize;
                if self.timestamps[i] >= self.timestamps[newest] {
                    newest = i;
                }
                n += 1;
            }
            out.push(step, self.timestamps[newest], self.values[newest]);
        }
        *self = out;
    }

    /// Merges normalized layers, oldest first: for a step present in several, the point with the
    /// latest timestamp wins, and of those the one in the newest layer.
    pub fn merge(layers: Vec<Series>) -> Series {
        let mut layers: Vec<Series> = layers.into_iter().filter(|l| !l.is_empty()).collect();
        match layers.len() {
            0 => return Series::default(),
            1 => return layers.pop().unwrap_or_default(),
            _ => {}
        }
        let mut acc = layers.remove(0);
        for newer in layers {
            acc = merge_two(&acc, &newer);
        }
        acc
    }

    pub fn slice(&self, range: StepRange) -> Series {
        if range == StepRange::default() {
            return self.clone();
        }
        let lo = range.min.map_or(0, |m| self.steps.partition_point(|&s| s < m));
        let hi = range.max.map_or(self.steps.len(), |m| self.steps.partition_point(|&s| s <= m));
        let hi = hi.max(lo);
        Series {
            steps: self.steps[lo..hi].to_vec(),
            timestamps: self.timestamps[lo..hi].to_vec(),
            values: self.values[lo..hi].to_vec(),
        }
    }

    /// Splits the step span into `n` equal-width buckets and returns the non-empty ones, so at most `n`.
    pub fn downsample(&self, n: usize) -> Vec<Bucket> {
        let (Some(&first), Some(&last)) = (self.steps.first(), self.steps.last()) else { return Vec::new() };
        let n = n.max(1) as i128;
        let span = last as i128 - first as i128 + 1;
        let width = ((span + n - 1) / n).max(1);
        // Exclusive upper bound of the bucket holding `step`: one division per bucket, not per point.
        let end_of = |step: i64| -> i128 {
            let index = (step as i128 - first as i128) / width;
            first as i128 + (index + 1) * width
        };
        let mut out: Vec<Bucket> = Vec::with_capacity(n.min(self.len() as i128) as usize);
        let mut i = 0;
        while i < self.steps.len() {
            let end = end_of(self.steps[i]);
            let v = self.values[i];
            let t = self.timestamps[i];
            let mut b = Bucket {
                step_min: self.steps[i],
                step_max: self.steps[i],
                time_first: t,
                time_last: t,
                min: v,
                max: v,
                last: v,
                count: 1,
            };
            i += 1;
            while i < self.steps.len() && (self.steps[i] as i128) < end {
                let v = self.values[i];
                b.step_max = self.steps[i];
                b.time_last = self.timestamps[i];
                b.last = v;
                b.count += 1;
                if !v.is_nan() {
                    b.min = if b.min.is_nan() { v } else { b.min.min(v) };
                    b.max = if b.max.is_nan() { v } else { b.max.max(v) };
                }
                i += 1;
            }
            out.push(b);
        }
        out
    }
}

/// Equal-width buckets over the steps `first..=last`, cut as `Series::downsample` cuts one
/// series: at most `n` buckets of `ceil((last - first + 1) / n)` steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepGrid {
    first: i64,
    last: i64,
    width: i128,
}

impl StepGrid {
    pub fn new(first: i64, last: i64, n: usize) -> Self {
        let (first, last) = (first.min(last), first.max(last));
        let n = n.max(1) as i128;
        let span = last as i128 - first as i128 + 1;
        StepGrid { first, last, width: ((span + n - 1) / n).max(1) }
    }

    /// The grid over several runs' step extents (`(first, last)` each); None when there are none.
    pub fn over(extents: impl IntoIterator<Item = (i64, i64)>, n: usize) -> Option<Self> {
        let (first, last) = extents.into_iter().reduce(|(a, b), (c, d)| (a.min(c), b.max(d)))?;
        Some(StepGrid::new(first, last, n))
    }

    /// How many buckets the grid has.
    pub fn len(&self) -> usize {
        ((self.last as i128 - self.first as i128) / self.width + 1) as usize
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    fn index(&self, step: i64) -> usize {
        ((step as i128 - self.first as i128) / self.width) as usize
    }

    /// The steps bucket `i` covers, both ends included.
    pub fn bounds(&self, i: usize) -> (i64, i64) {
        let lo = self.first as i128 + i as i128 * self.width;
        let hi = (lo + self.width - 1).min(self.last as i128);
        (lo as i64, hi as i64)
    }
}

/// One bucket of a group of runs on a common grid: the mean over the runs of each one's last
/// value in the bucket (finite values only; None when there is none), the min and max of their
/// points (NaN ignored unless every value is NaN), and how many runs have points in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupBucket {
    pub step_min: i64,
    pub step_max: i64,
    pub mean: Option<f64>,
    pub min: f64,
    pub max: f64,
    pub runs: u64,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    runs: u64,
    sum: f64,
    finite: u64,
    min: f64,
    max: f64,
}

impl Default for Slot {
    fn default() -> Self {
        Slot { runs: 0, sum: 0.0, finite: 0, min: f64::NAN, max: f64::NAN }
    }
}

/// Runs' series reduced onto one grid as they are added, one series at a time: memory is the
/// grid's, whatever the number of runs or points.
#[derive(Debug, Clone)]
pub struct GroupBuckets {
    grid: StepGrid,
    slots: Vec<Slot>,
}

impl GroupBuckets {
    pub fn new(grid: StepGrid) -> Self {
        GroupBuckets { grid, slots: vec![Slot::default(); grid.len()] }
    }

    /// Adds one run's series (sorted by step, one point a step); points off the grid are left out.
    pub fn add(&mut self, series: &Series) {
        let start = series.steps.partition_point(|&s| s < self.grid.first);
        let end = series.steps.partition_point(|&s| s <= self.grid.last);
        let mut current: Option<(usize, f64)> = None;
        for i in start..end {
            let (index, v) = (self.grid.index(series.steps[i]), series.values[i]);
            if let Some((open, last)) = current {
                if open != index {
                    self.close(open, last);
                }
            }
            let slot = &mut self.slots[index];
            if !v.is_nan() {
                slot.min = if slot.min.is_nan() { v } else { slot.min.min(v) };
                slot.max = if slot.max.is_nan() { v } else { slot.max.max(v) };
            }
            current = Some((index, v));
        }
        if let Some((open, last)) = current {
            self.close(open, last);
        }
    }

    /// A run's last value in bucket `index`: it counts the run, and its value if finite.
    fn close(&mut self, index: usize, last: f64) {
        let slot = &mut self.slots[index];
        slot.runs += 1;
        if last.is_finite() {
            slot.sum += last;
            slot.finite += 1;
        }
    }

    /// The buckets some run has points in, by step.
    pub fn buckets(&self) -> Vec<GroupBucket> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.runs > 0)
            .map(|(i, s)| {
                let (step_min, step_max) = self.grid.bounds(i);
                let mean = (s.finite > 0).then(|| s.sum / s.finite as f64);
                GroupBucket { step_min, step_max, mean, min: s.min, max: s.max, runs: s.runs }
            })
            .collect()
    }
}

fn merge_two(older: &Series, newer: &Series) -> Series {
    let mut out = Series::default();
    let cap = older.len() + newer.len();
    out.steps.reserve(cap);
    out.timestamps.reserve(cap);
    out.values.reserve(cap);
    let (mut i, mut j) = (0, 0);
    while i < older.len() || j < newer.len() {
        let take_newer = match (older.steps.get(i), newer.steps.get(j)) {
            (Some(a), Some(b)) if a == b => {
                if newer.timestamps[j] >= older.timestamps[i] {
                    i += 1;
                    true
                } else {
                    j += 1;
                    false
                }
            }
            (Some(a), Some(b)) => b < a,
            (None, Some(_)) => true,
            _ => false,
        };
        if take_newer {
            out.push(newer.steps[j], newer.timestamps[j], newer.values[j]);
            j += 1;
        } else {
            out.push(older.steps[i], older.timestamps[i], older.values[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: &[(i64, f64)]) -> Series {
        let mut s = Series::default();
        for &(step, v) in points {
            s.push(step, step.wrapping_mul(10), v);
        }
        s
    }

    #[test]
    fn normalize_keeps_the_last_write_of_each_step() {
        let mut s = series(&[(2, 1.0), (0, 2.0), (2, 3.0), (1, 4.0)]);
        s.normalize();
        assert_eq!(s.steps, vec![0, 1, 2]);
        assert_eq!(s.values, vec![2.0, 4.0, 3.0]);
    }

    /// Servers that took writes of one step persist them in any order: the later timestamp wins
    /// whichever layer holds it, and a tie goes to the newer layer.
    #[test]
    fn the_latest_timestamp_of_a_step_wins_and_ties_go_to_the_last_write() {
        let mut s = Series::default();
        for (step, ts, v) in [(1, 50, 1.0), (0, 10, 2.0), (1, 40, 3.0), (0, 10, 4.0), (2, 5, 5.0)] {
            s.push(step, ts, v);
        }
        s.normalize();
        assert_eq!((s.steps.clone(), s.values.clone()), (vec![0, 1, 2], vec![4.0, 1.0, 5.0]));
        let mut older = Series::default();
        older.push(0, 100, 1.0);
        older.push(1, 10, 1.0);
        older.push(2, 20, 1.0);
        let mut newer = Series::default();
        newer.push(0, 50, 2.0);
        newer.push(1, 60, 2.0);
        newer.push(2, 20, 2.0);
        let merged = Series::merge(vec![older, newer]);
        assert_eq!(merged.values, vec![1.0, 2.0, 2.0]);
        assert_eq!(merged.timestamps, vec![100, 60, 20]);
    }

    #[test]
    fn merge_prefers_newer_layers() {
        let merged = Series::merge(vec![
            series(&[(0, 1.0), (1, 1.0), (3, 1.0)]),
            series(&[(1, 2.0), (2, 2.0)]),
            series(&[(3, 3.0)]),
        ]);
        assert_eq!(merged.steps, vec![0, 1, 2, 3]);
        assert_eq!(merged.values, vec![1.0, 2.0, 2.0, 3.0]);
    }

    #[test]
    fn downsampling_never_hides_a_spike() {
        let mut points: Vec<(i64, f64)> = (0..1_000_000).map(|i| (i, (i % 7) as f64)).collect();
        points[523_457].1 = 1e9;
        let buckets = series(&points).downsample(1000);
        assert_eq!(buckets.len(), 1000);
        assert_eq!(buckets.iter().map(|b| b.count).sum::<u64>(), 1_000_000);
        let spiked: Vec<_> = buckets.iter().filter(|b| b.max == 1e9).collect();
        assert_eq!(spiked.len(), 1);
        assert!(spiked[0].step_min <= 523_457 && spiked[0].step_max >= 523_457);
        assert_eq!(buckets.last().unwrap().last, (999_999 % 7) as f64);
        assert_eq!(buckets, series(&points).downsample(1000), "deterministic");
        let widths: Vec<i64> = buckets.iter().map(|b| b.step_max - b.step_min + 1).collect();
        assert!(widths.iter().all(|&w| w == 1000), "equal widths: {:?}", &widths[..3]);
    }

    #[test]
    fn downsampling_handles_extreme_steps_and_sparse_series() {
        let s = series(&[(i64::MIN, 1.0), (0, 2.0), (i64::MAX, 3.0)]);
        let b = s.downsample(2);
        assert_eq!(b.iter().map(|b| b.count).sum::<u64>(), 3);
        assert!(b.len() <= 2);
        let sparse = series(&[(0, 1.0), (1, 5.0), (1_000_000, 2.0)]).downsample(10);
        assert_eq!(sparse.len(), 2);
        assert_eq!((sparse[0].max, sparse[1].last), (5.0, 2.0));
    }

    #[test]
    fn buckets_ignore_nan_for_min_and_max_but_keep_it_as_last() {
        let b = series(&[(0, 1.0), (1, f64::NAN)]).downsample(1);
        assert_eq!((b[0].min, b[0].max, b[0].count), (1.0, 1.0, 2));
        assert!(b[0].last.is_nan());
    }

    #[test]
    fn groups_average_each_runs_last_value_per_bucket_on_one_grid() {
        let a = series(&[(0, 1.0), (4, 2.0), (5, 10.0), (9, 4.0)]);
        let b = series(&[(2, 3.0), (7, f64::NAN), (8, f64::INFINITY)]);
        let c = series(&[(1, f64::NAN)]);
        let grid = StepGrid::over([(0, 9), (2, 8), (1, 1)], 2).unwrap();
        assert_eq!((grid.len(), grid.bounds(0), grid.bounds(1)), (2, (0, 4), (5, 9)));
        let mut group = GroupBuckets::new(grid);
        for s in [&a, &b, &c] {
            group.add(s);
        }
        let buckets = group.buckets();
        assert_eq!(buckets.len(), 2);
        // 0..=4: a's last is 2, b's 3, c's NaN (counted, left out of the mean).
        assert_eq!((buckets[0].mean, buckets[0].min, buckets[0].max, buckets[0].runs), (Some(2.5), 1.0, 3.0, 3));
        // 5..=9: a's last is 4, b's +inf (left out of the mean, kept as the max).
        assert_eq!(
            (buckets[1].mean, buckets[1].min, buckets[1].max, buckets[1].runs),
            (Some(4.0), 4.0, f64::INFINITY, 2)
        );
        assert_eq!((buckets[1].step_min, buckets[1].step_max), (5, 9));
        // One run's grid is the one `downsample` cuts.
        let mut alone = GroupBuckets::new(StepGrid::over([(0, 9)], 3).unwrap());
        alone.add(&a);
        let cut: Vec<(f64, f64, f64)> = a.downsample(3).iter().map(|b| (b.last, b.min, b.max)).collect();
        let grouped: Vec<(f64, f64, f64)> = alone.buckets().iter().map(|b| (b.mean.unwrap(), b.min, b.max)).collect();
        assert_eq!(cut, grouped);
    }

    #[test]
    fn group_buckets_of_only_nan_have_no_mean_and_extreme_steps_fit() {
        let mut group = GroupBuckets::new(StepGrid::new(i64::MIN, i64::MAX, 3));
        group.add(&series(&[(i64::MIN, f64::NAN), (i64::MAX, 1.0)]));
        let b = group.buckets();
        assert_eq!(b.len(), 2);
        assert!(b[0].mean.is_none() && b[0].min.is_nan());
        assert_eq!((b[0].step_min, b[1].step_max, b[1].mean), (i64::MIN, i64::MAX, Some(1.0)));
        assert!(StepGrid::over([], 5).is_none());
    }

    #[test]
    fn slices_are_inclusive() {
        let s = series(&[(0, 0.0), (5, 5.0), (10, 10.0)]);
        assert_eq!(s.slice(StepRange { min: Some(5), max: Some(10) }).steps, vec![5, 10]);
        assert_eq!(s.slice(StepRange { min: Some(6), max: Some(4) }).steps, Vec::<i64>::new());
    }
}
