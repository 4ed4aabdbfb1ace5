//! Matching GPU names as NVML spells them ("NVIDIA A100-SXM4-80GB") against the short names of
//! price tables and data files ("A100 80GB", "H100 PCIe"): by whole words, so that "A10G" does
//! not match an A100 nor "L4" an L40S.

/// Lower-case alphanumeric words: "NVIDIA A100-SXM4-80GB" -> [nvidia, a100, sxm4, 80gb].
pub fn gpu_name_words(name: &str) -> Vec<String> {
    name.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// How many words the short name `pattern` has, when every one of them is a word of the GPU
/// (`gpu_words`, from [`gpu_name_words`]); None when it does not name this GPU, or is empty.
/// More words is a more specific match.
pub fn gpu_name_match(pattern: &str, gpu_words: &[String]) -> Option<usize> {
    let wanted = gpu_name_words(pattern);
    (!wanted.is_empty() && wanted.iter().all(|w| gpu_words.contains(w))).then_some(wanted.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_words_name_a_gpu() {
        let a100 = gpu_name_words("NVIDIA A100-SXM4-80GB");
        assert_eq!(a100, ["nvidia", "a100", "sxm4", "80gb"]);
        assert_eq!(gpu_name_match("A100 80GB", &a100), Some(2));
        assert_eq!(gpu_name_match("A100-40GB", &a100), None);
        assert_eq!(gpu_name_match("A10G", &a100), None);
        assert_eq!(gpu_name_match("L4", &gpu_name_words("NVIDIA L40S")), None);
        assert_eq!(gpu_name_match("", &a100), None);
    }
}
