//! Lists and maps of a media body counted while they parse: at most their limit is kept, the
//! rest only counted, so a body past a limit is refused saying how many came, before its excess
//! becomes values.

use serde::de::{Deserialize, Deserializer, Error, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use trainlog_schema::limits::{
    MAX_HISTOGRAMS_PER_REQUEST, MAX_HISTOGRAM_BINS, MAX_MEDIA_BOXES, MAX_MEDIA_CLASS_LABELS,
    MAX_MEDIA_ITEMS_PER_REQUEST, MAX_MEDIA_MASKS,
};

/// A list's (or a map's) limit and what its items are, as the refusal says it.
pub(crate) trait Limit {
    const MAX: usize;
    /// `at most {MAX} {WHAT}, got {n}`.
    const WHAT: &'static str;
}

macro_rules! limit {
    ($name:ident, $max:expr, $what:literal) => {
        pub(crate) struct $name;
        impl Limit for $name {
            const MAX: usize = $max;
            const WHAT: &'static str = $what;
        }
    };
}

limit!(Histograms, MAX_HISTOGRAMS_PER_REQUEST, "histograms in one request");
limit!(Edges, MAX_HISTOGRAM_BINS + 1, "edges in a histogram");
limit!(Bins, MAX_HISTOGRAM_BINS, "bins (counts) in a histogram");
limit!(Items, MAX_MEDIA_ITEMS_PER_REQUEST, "items in one request");
limit!(Boxes, MAX_MEDIA_BOXES, "boxes on an item");
limit!(Masks, MAX_MEDIA_MASKS, "masks on an item");
limit!(ClassLabels, MAX_MEDIA_CLASS_LABELS, "class labels on an item");

fn refusal<E: Error, L: Limit>(n: usize) -> E {
    E::custom(format!("at most {} {}, got {n}", L::MAX, L::WHAT))
}

/// A list of at most `L::MAX` items.
pub(crate) fn at_most<'de, D, T, L>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
    L: Limit,
{
    struct List<T, L>(PhantomData<(T, L)>);

    impl<'de, T: Deserialize<'de>, L: Limit> Visitor<'de> for List<T, L> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "a list of at most {} {}", L::MAX, L::WHAT)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut items = Vec::new();
            while items.len() < L::MAX {
                match seq.next_element()? {
                    Some(item) => items.push(item),
                    None => return Ok(items),
                }
            }
            let mut n = items.len();
            while seq.next_element::<IgnoredAny>()?.is_some() {
                n += 1;
            }
            if n > L::MAX {
                return Err(refusal::<A::Error, L>(n));
            }
            Ok(items)
        }
    }

    d.deserialize_seq(List::<T, L>(PhantomData))
}

/// A map of at most `L::MAX` entries.
pub(crate) fn at_most_entries<'de, D, K, V, L>(d: D) -> Result<BTreeMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Ord,
    V: Deserialize<'de>,
    L: Limit,
{
    struct Entries<K, V, L>(PhantomData<(K, V, L)>);

    impl<'de, K: Deserialize<'de> + Ord, V: Deserialize<'de>, L: Limit> Visitor<'de> for Entries<K, V, L> {
        type Value = BTreeMap<K, V>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "an object of at most {} {}", L::MAX, L::WHAT)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<BTreeMap<K, V>, A::Error> {
            let mut entries = BTreeMap::new();
            let mut n = 0usize;
            while n < L::MAX {
                match map.next_entry()? {
                    Some((k, v)) => {
                        entries.insert(k, v);
                        n += 1;
                    }
                    None => return Ok(entries),
                }
            }
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                n += 1;
            }
            if n > L::MAX {
                return Err(refusal::<A::Error, L>(n));
            }
            Ok(entries)
        }
    }

    d.deserialize_map(Entries::<K, V, L>(PhantomData))
}
