//! A problem with a configuration, named by its key: what `check-config`,
//! a refused start and the admin API's source writes all report, listing
//! every one they find.

/// One thing wrong with a configuration, at a key (`sources.github.sinks[0]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The key's path; empty for the file as a whole.
    pub key: String,
    pub message: String,
}

impl Problem {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem { key: key.into(), message: message.into() }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() { f.write_str(&self.message) } else { write!(f, "{}: {}", self.key, self.message) }
    }
}

/// Collects the problems of one section, each named by its key: a
/// subsystem's settings check themselves through it, under whatever key
/// their section has in the file.
pub struct Checker<'a> {
    found: &'a mut Vec<Problem>,
    at: String,
}

impl<'a> Checker<'a> {
    /// Problems of the section at `at` (empty: the file as a whole).
    pub fn new(found: &'a mut Vec<Problem>, at: impl Into<String>) -> Checker<'a> {
        Checker { found, at: at.into() }
    }

    /// The checker of a section inside this one.
    pub fn section(&mut self, name: &str) -> Checker<'_> {
        let at = self.key(name);
        Checker { found: self.found, at }
    }

    /// The full key of `field` of this section.
    pub fn key(&self, field: &str) -> String {
        match (self.at.is_empty(), field.is_empty()) {
            (_, true) => self.at.clone(),
            (true, false) => field.to_string(),
            (false, false) if field.starts_with('[') => format!("{}{field}", self.at),
            (false, false) => format!("{}.{field}", self.at),
        }
    }

    pub fn add(&mut self, field: &str, message: impl Into<String>) {
        let key = self.key(field);
        self.found.push(Problem::new(key, message));
    }

    pub fn push(&mut self, problem: Problem) {
        self.found.push(problem);
    }

    pub fn at_least(&mut self, field: &str, value: u64, min: u64) {
        if value < min {
            self.add(field, format!("{value} is out of range: at least {min}"));
        }
    }

    pub fn within(&mut self, field: &str, value: u64, min: u64, max: u64) {
        if !(min..=max).contains(&value) {
            self.add(field, format!("{value} is out of range: between {min} and {max}"));
        }
    }

    /// A duration written in milliseconds, within `min_ms..=max_ms`.
    pub fn within_ms(&mut self, field: &str, value: std::time::Duration, min_ms: u64, max_ms: u64) {
        self.within(field, crate::settings::as_millis(value), min_ms, max_ms);
    }

    /// A duration written in milliseconds, at least `min_ms`.
    pub fn at_least_ms(&mut self, field: &str, value: std::time::Duration, min_ms: u64) {
        self.at_least(field, crate::settings::as_millis(value), min_ms);
    }

    /// A `rate` above 0 with a `burst` of at least 1.
    pub fn rate(&mut self, rate: f64, burst: u32) {
        if !(rate.is_finite() && rate > 0.0) {
            self.add("rate", format!("{rate} is out of range: above 0"));
        }
        if burst == 0 {
            self.add("burst", "0 is out of range: at least 1");
        }
    }
}
