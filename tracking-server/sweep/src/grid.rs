//! Grid search: the cartesian product of every parameter's values, enumerated in a fixed order.
//!
//! Parameters are taken in the space's order (sorted by name) and the last one varies fastest,
//! like an odometer: point 0 takes every parameter's first value, point 1 advances the last
//! parameter, and so on. Values come in their listed order (`Constant`, `Categorical`), or
//! ascending (`IntUniform`: every integer; `QUniform`: every multiple of q in [min, max]).

use crate::random::QGrid;
use crate::space::{Distribution, Params, Space};
use crate::{Error, Result};
use serde_json::Value;

/// The values of one parameter along the grid.
enum Axis<'a> {
    Listed(&'a [Value]),
    Integers { min: i64, max: i64 },
    Multiples(QGrid),
}

impl Axis<'_> {
    fn len(&self) -> u128 {
        match self {
            Axis::Listed(values) => values.len() as u128,
            Axis::Integers { min, max } => (i128::from(*max) - i128::from(*min) + 1) as u128,
            Axis::Multiples(grid) => u128::from(grid.len()),
        }
    }

    fn value(&self, position: u64) -> Value {
        match self {
            Axis::Listed(values) => values.get(position as usize).cloned().unwrap_or(Value::Null),
            Axis::Integers { min, .. } => Value::from((i128::from(*min) + i128::from(position)) as i64),
            Axis::Multiples(grid) => grid.value(grid.first.saturating_add_unsigned(position)),
        }
    }
}

fn axis<'a>(name: &str, distribution: &'a Distribution) -> Result<Axis<'a>> {
    let field = format!("parameters.{name}");
    distribution.validate(&field)?;
    let invalid = |reason: String| Error::Invalid { field: field.clone(), reason };
    match *distribution {
        Distribution::Constant(ref value) => Ok(Axis::Listed(std::slice::from_ref(value))),
        Distribution::Categorical(ref values) => Ok(Axis::Listed(values)),
        Distribution::IntUniform { min, max } => Ok(Axis::Integers { min, max }),
        Distribution::QUniform { min, max, q } => QGrid::new(min, max, q)
            .map(Axis::Multiples)
            .ok_or_else(|| invalid(format!("grid search needs values, and no multiple of q ({q}) can be listed in [{min}, {max}]"))),
        Distribution::Uniform { .. } | Distribution::LogUniform { .. } | Distribution::QLogUniform { .. } => Err(invalid(
            "grid search needs values: use `values`, `value`, an integer range or q_uniform, not a continuous distribution"
                .into(),
        )),
    }
}

fn axes(space: &Space) -> Result<Vec<(&str, Axis<'_>)>> {
    space.params.iter().map(|(name, distribution)| Ok((name.as_str(), axis(name, distribution)?))).collect()
}

/// How many points the grid has: the product of every parameter's number of values.
pub fn size(space: &Space) -> Result<u64> {
    size_of(&axes(space)?)
}

fn size_of(axes: &[(&str, Axis<'_>)]) -> Result<u64> {
    axes.iter().try_fold(1u64, |product, (name, axis)| {
        if axis.len() == 0 {
            return Err(Error::Invalid {
                field: format!("parameters.{name}"),
                reason: "grid search needs at least one value".into(),
            });
        }
        u64::try_from(u128::from(product).saturating_mul(axis.len())).map_err(|_| Error::Invalid {
            field: "parameters".into(),
            reason: format!("the grid has more than {} points (at parameter {name})", u64::MAX),
        })
    })
}

/// The `index`-th point of the grid (see the module documentation for the order), or None past
/// the last one.
pub fn point(space: &Space, index: u64) -> Result<Option<Params>> {
    let axes = axes(space)?;
    if index >= size_of(&axes)? {
        return Ok(None);
    }
    let mut remainder = index;
    let mut params = Params::new();
    for (name, axis) in axes.iter().rev() {
        let len = axis.len();
        params.insert((*name).to_owned(), axis.value((u128::from(remainder) % len) as u64));
        remainder = (u128::from(remainder) / len) as u64;
    }
    Ok(Some(params))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn space(params: Vec<(&str, Distribution)>) -> Space {
        Space::new(params.into_iter().map(|(n, d)| (n.to_owned(), d))).unwrap()
    }

    #[test]
    fn covers_the_cartesian_product_once() {
        let space = space(vec![
            ("opt", Distribution::Categorical(vec![Value::from("adam"), Value::from("sgd"), Value::from(3)])),
            ("layers", Distribution::IntUniform { min: 1, max: 4 }),
            ("batch", Distribution::QUniform { min: 16.0, max: 64.0, q: 16.0 }),
            ("seed", Distribution::Constant(Value::from(0))),
            ("dropout", Distribution::QUniform { min: 0.0, max: 0.5, q: 0.25 }),
        ]);
        // 3 optimizers × 4 layer counts × 4 batch sizes (16, 32, 48, 64) × 1 × 3 dropouts.
        assert_eq!(size(&space), Ok(144));
        let points: Vec<Params> = (0..144).map(|i| point(&space, i).unwrap().unwrap()).collect();
        assert_eq!(point(&space, 144), Ok(None));
        assert_eq!(point(&space, u64::MAX), Ok(None));
        let distinct: BTreeSet<String> = points.iter().map(|p| serde_json::to_string(p).unwrap()).collect();
        assert_eq!(distinct.len(), 144);
        let mut expected = BTreeSet::new();
        for batch in [16, 32, 48, 64] {
            for dropout in [0.0, 0.25, 0.5] {
                for layers in 1..=4 {
                    for opt in [Value::from("adam"), Value::from("sgd"), Value::from(3)] {
                        let p: Params = [
                            ("batch".to_owned(), Value::from(batch)),
                            ("dropout".to_owned(), Value::from(dropout)),
                            ("layers".to_owned(), Value::from(layers)),
                            ("opt".to_owned(), opt),
                            ("seed".to_owned(), Value::from(0)),
                        ]
                        .into();
                        expected.insert(serde_json::to_string(&p).unwrap());
                    }
                }
            }
        }
        assert_eq!(distinct, expected);
        // Fixed order: parameters by name, the last varying fastest.
        assert_eq!(points[0]["batch"], 16);
        assert_eq!(points[0]["opt"], "adam");
        assert_eq!(points[1]["opt"], "sgd");
        assert_eq!(points[3]["layers"], 2);
        assert_eq!(points[143]["batch"], 64);
        assert!(points[0]["batch"].is_i64(), "integral q gives integers");
        assert!(points[1]["dropout"].is_f64());
    }

    #[test]
    fn continuous_distributions_cannot_be_gridded() {
        for d in [
            Distribution::Uniform { min: 0.0, max: 1.0 },
            Distribution::LogUniform { min: 1e-3, max: 1.0 },
            Distribution::QLogUniform { min: 1.0, max: 100.0, q: 1.0 },
        ] {
            let space = space(vec![("a", Distribution::IntUniform { min: 0, max: 2 }), ("lr", d)]);
            let Err(Error::Invalid { field, reason }) = size(&space) else {
                panic!("gridded a continuous distribution")
            };
            assert_eq!(field, "parameters.lr");
            assert!(reason.contains("grid search needs values"), "{reason}");
            assert!(point(&space, 0).is_err());
        }
        let unvalidated = Space { params: vec![("n".to_owned(), Distribution::IntUniform { min: 5, max: 1 })] };
        assert!(matches!(size(&unvalidated), Err(Error::Invalid { field, .. }) if field == "parameters.n"));
        let empty_multiples = space(vec![("x", Distribution::QUniform { min: 0.1, max: 0.2, q: 1.0 })]);
        assert!(matches!(size(&empty_multiples), Err(Error::Invalid { field, .. }) if field == "parameters.x"));
    }

    #[test]
    fn overflowing_size_is_an_error_and_empty_space_has_one_point() {
        let huge = space(vec![
            ("a", Distribution::IntUniform { min: i64::MIN, max: i64::MAX }),
            ("b", Distribution::IntUniform { min: 0, max: 1 }),
        ]);
        assert!(matches!(size(&huge), Err(Error::Invalid { field, .. }) if field == "parameters"));
        let full = space(vec![("a", Distribution::IntUniform { min: i64::MIN, max: i64::MAX })]);
        assert!(size(&full).is_err(), "2^64 points do not fit");
        let wide = space(vec![("a", Distribution::IntUniform { min: i64::MIN, max: i64::MAX - 1 })]);
        assert_eq!(size(&wide), Ok(u64::MAX));
        assert_eq!(point(&wide, u64::MAX - 1).unwrap().unwrap()["a"], i64::MAX - 1);
        assert_eq!(size(&Space::default()), Ok(1));
        assert_eq!(point(&Space::default(), 0), Ok(Some(Params::new())));
        assert_eq!(point(&Space::default(), 1), Ok(None));
    }
}
