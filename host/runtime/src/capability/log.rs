//! The `log` capability: guest log lines to `tracing`, labelled and bounded,
//! from the `ankusa:sink/log` import and from the guest's stdout (info) and
//! stderr (warn).
//!
//! Every line carries the sink's labels (source, sink). A token bucket per
//! sink (shared by all its instances) bounds the rate, and each line is cut
//! to [`MAX_LINE_BYTES`], so a sink that logs in a tight loop costs the node
//! a counter increment per line, not a flood. Suppressed lines are counted
//! and reported in one line at most every [`REPORT_EVERY`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

use wasmtime::component::{HasSelf, Linker};

use super::{Capability, InstanceBuilder, SinkCapability, SinkContext};
use crate::bindings::{Level, ankusa};
use crate::error::LoadError;
use crate::labels::SinkLabel;
use crate::rate::{Limiter, Rate};
use crate::state::{Caller, InstanceState};

pub const MAX_LINE_BYTES: usize = 4096;
/// How often a sink's suppressed lines are reported, at most: a sink
/// over its rate has lines suppressed on nearly every delivery, and a
/// report for each would be the flood the limit exists to stop.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);
/// Lines kept by a capture (tests only), so a flood cannot exhaust memory.
const MAX_CAPTURED: usize = 10_000;

/// One captured line, for plugin tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    pub level: Level,
    pub message: String,
}

/// Token bucket limits for guest logs.
#[derive(Clone, Copy, Debug)]
pub struct LogRate {
    pub lines_per_sec: u32,
    pub burst: u32,
}

impl Default for LogRate {
    fn default() -> Self {
        LogRate { lines_per_sec: 100, burst: 200 }
    }
}

/// What the last report of suppressed lines covered.
#[derive(Default)]
struct Reported {
    lines: u64,
    at: Option<Instant>,
}

/// The log channel of one sink, shared by its instances.
pub struct LogChannel {
    label: SinkLabel,
    limiter: Limiter,
    suppressed: AtomicU64,
    reported: Mutex<Reported>,
    capture: Option<Mutex<Vec<LogLine>>>,
}

impl LogChannel {
    pub fn new(label: SinkLabel, rate: LogRate, capture: bool) -> Arc<Self> {
        Arc::new(LogChannel {
            label,
            limiter: Limiter::new(Rate { per_second: f64::from(rate.lines_per_sec), burst: rate.burst }),
            suppressed: AtomicU64::new(0),
            reported: Mutex::new(Reported::default()),
            capture: capture.then(|| Mutex::new(Vec::new())),
        })
    }

    /// Lines captured so far (empty unless created with `capture`).
    pub fn captured(&self) -> Vec<LogLine> {
        self.capture.as_ref().map(|c| c.lock().unwrap_or_else(|e| e.into_inner()).clone()).unwrap_or_default()
    }

    /// Lines dropped by the rate limit since the channel was made.
    pub fn suppressed_total(&self) -> u64 {
        self.suppressed.load(Ordering::Relaxed)
    }

    pub fn emit(&self, level: Level, message: &str) {
        self.emit_for("", level, message);
    }

    /// A line of a call for `caller`'s hook (a sink's instances serve
    /// every source bound to it); `""`: the channel's own source.
    pub fn emit_for(&self, caller: &str, level: Level, message: &str) {
        if !self.limiter.try_take() {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let message = cut(message);
        let source = if caller.is_empty() { self.label.source.as_str() } else { caller };
        let sink = self.label.sink.as_str();
        match level {
            Level::Trace => tracing::trace!(target: "ankusa::guest", source, sink, "{message}"),
            Level::Debug => tracing::debug!(target: "ankusa::guest", source, sink, "{message}"),
            Level::Info => tracing::info!(target: "ankusa::guest", source, sink, "{message}"),
            Level::Warn => tracing::warn!(target: "ankusa::guest", source, sink, "{message}"),
            Level::Error => tracing::error!(target: "ankusa::guest", source, sink, "{message}"),
        }
        if let Some(capture) = &self.capture {
            let mut lines = capture.lock().unwrap_or_else(|e| e.into_inner());
            if lines.len() < MAX_CAPTURED {
                lines.push(LogLine { level, message: message.to_string() });
            }
        }
    }

    /// Report lines dropped since the last report, if any and if the last
    /// report is [`REPORT_EVERY`] old; returns how many it reported. Called
    /// by the pool after each delivery, so the report is never itself
    /// rate-limited by the bucket.
    pub fn report_suppressed(&self) -> Option<u64> {
        let total = self.suppressed.load(Ordering::Relaxed);
        let mut reported = match self.reported.try_lock() {
            Ok(reported) => reported,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            // Another delivery is reporting right now.
            Err(TryLockError::WouldBlock) => return None,
        };
        let due = reported.at.is_none_or(|at| at.elapsed() >= REPORT_EVERY);
        if total <= reported.lines || !due {
            return None;
        }
        let lines = total - reported.lines;
        tracing::warn!(
            target: "ankusa::guest",
            source = self.label.source.as_str(),
            sink = self.label.sink.as_str(),
            "{lines} guest log lines suppressed by the rate limit"
        );
        *reported = Reported { lines: total, at: Some(Instant::now()) };
        Some(lines)
    }
}

fn cut(message: &str) -> &str {
    if message.len() <= MAX_LINE_BYTES {
        return message;
    }
    let mut end = MAX_LINE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

/// A guest's stdout or stderr, turned into log lines on the sink's channel
/// (so a Python traceback or a `println!` reaches the operator, labelled and
/// rate-limited like every other guest line).
pub struct GuestOutput {
    log: Arc<LogChannel>,
    /// The source the running call is for.
    caller: Caller,
    level: Level,
    /// stderr only: where an uncaught exception's message is kept.
    error: Option<GuestError>,
}

impl GuestOutput {
    pub fn new(log: Arc<LogChannel>, caller: Caller, level: Level) -> Self {
        GuestOutput { log, caller, level, error: None }
    }

    /// stderr: also watch for a Python traceback, keep its exception in
    /// `error`, and drop the componentize runtime's panic report after it.
    pub fn stderr(log: Arc<LogChannel>, caller: Caller, error: GuestError) -> Self {
        GuestOutput { log, caller, level: Level::Warn, error: Some(error) }
    }
}

/// What an instance's guest said went wrong on stderr during its call: an
/// uncaught Python exception's last traceback line (`ValueError: boom`).
/// A trap that follows is reported with it, rather than with the trap the
/// componentize runtime raises after printing it.
#[derive(Clone, Default)]
pub struct GuestError(Arc<std::sync::Mutex<Option<String>>>);

impl GuestError {
    pub fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn set(&self, message: &str) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(message.to_string());
    }
}

/// Where a stderr stream is in a Python traceback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Traceback {
    None,
    /// After `Traceback (most recent call last):`, reading frames.
    Frames,
    /// The exception line was read; a runtime panic report may follow.
    Raised,
    /// Inside that panic report, logged at `debug` only.
    Panic,
}

impl wasmtime_wasi::cli::IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for GuestOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(LineWriter {
            log: self.log.clone(),
            caller: self.caller.clone(),
            level: self.level,
            error: self.error.clone(),
            traceback: Traceback::None,
            pending: Vec::new(),
        })
    }
}

struct LineWriter {
    log: Arc<LogChannel>,
    caller: Caller,
    level: Level,
    error: Option<GuestError>,
    traceback: Traceback,
    pending: Vec<u8>,
}

impl LineWriter {
    fn emit(&mut self, line: &[u8]) {
        let line = String::from_utf8_lossy(line);
        let line = line.trim_end_matches(['\r', '\n']);
        if !line.is_empty() {
            let level = self.level_of(line);
            self.log.emit_for(&self.caller.get(), level, line);
        }
    }

    /// Follow a Python traceback through stderr: remember its exception
    /// line, and move the componentize runtime's panic report after it
    /// down to `debug` (it says only that Python raised, and would read
    /// as a bug in the host).
    fn level_of(&mut self, line: &str) -> Level {
        let Some(error) = &self.error else { return self.level };
        if line == "Traceback (most recent call last):" {
            self.traceback = Traceback::Frames;
            return self.level;
        }
        match self.traceback {
            Traceback::Frames if !line.starts_with(char::is_whitespace) => {
                error.set(line);
                self.traceback = Traceback::Raised;
                self.level
            }
            Traceback::Raised if line.starts_with("thread '") && line.contains("panicked at") => {
                self.traceback = Traceback::Panic;
                Level::Debug
            }
            Traceback::Panic => {
                if line.starts_with("note: run with `RUST_BACKTRACE") {
                    self.traceback = Traceback::None;
                }
                Level::Debug
            }
            _ => self.level,
        }
    }
}

impl tokio::io::AsyncWrite for LineWriter {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.pending.extend_from_slice(buf);
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            self.emit(&line);
        }
        if self.pending.len() > MAX_LINE_BYTES {
            let line = std::mem::take(&mut self.pending);
            self.emit(&line);
        }
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let line = std::mem::take(&mut self.pending);
        self.emit(&line);
        std::task::Poll::Ready(Ok(()))
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        let line = std::mem::take(&mut self.pending);
        self.emit(&line);
    }
}

/// The capability itself.
pub struct Log;

/// One sink's channel, shared by its instances.
struct SinkLog(Arc<LogChannel>);

/// An instance's handle on its sink's channel, and its running call's
/// source.
struct InstanceLog(Arc<LogChannel>, Caller);

impl Capability for Log {
    fn link(&self, linker: &mut Linker<InstanceState>) -> wasmtime::Result<()> {
        ankusa::sink::log::add_to_linker::<_, HasSelf<InstanceState>>(linker, |s| s)
    }

    fn for_sink(&self, sink: &SinkContext) -> Result<Arc<dyn SinkCapability>, LoadError> {
        Ok(Arc::new(SinkLog(sink.log.clone())))
    }
}

impl SinkCapability for SinkLog {
    fn prepare(&self, instance: &mut InstanceBuilder) -> wasmtime::Result<()> {
        let caller = instance.caller.clone();
        instance.wasi.stdout(GuestOutput::new(self.0.clone(), caller.clone(), Level::Info));
        let error = GuestError::default();
        instance.wasi.stderr(GuestOutput::stderr(self.0.clone(), caller.clone(), error.clone()));
        instance.extensions.insert(InstanceLog(self.0.clone(), caller));
        instance.extensions.insert(error);
        Ok(())
    }
}

impl ankusa::sink::log::Host for InstanceState {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        if let Some(InstanceLog(channel, caller)) = self.extensions.get_mut::<InstanceLog>() {
            channel.emit_for(&caller.get(), level, &message);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_traceback_gives_its_exception_and_the_runtime_panic_after_it_goes_to_debug() {
        let channel = LogChannel::new(SinkLabel::new("source", "sink"), LogRate::default(), true);
        let error = GuestError::default();
        let output = GuestOutput::stderr(channel.clone(), Caller::default(), error.clone());
        let mut writer = LineWriter {
            log: channel.clone(),
            caller: output.caller.clone(),
            level: output.level,
            error: output.error.clone(),
            traceback: Traceback::None,
            pending: Vec::new(),
        };
        let stderr = "starting\nTraceback (most recent call last):\n  File \"/0/app.py\", line 60, in deliver\n    \
                      raise ValueError(\"no total\")\nValueError: no total\nthread '<unnamed>' panicked at src/lib.rs:9:5:\n\
                      Python raised\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\nlater\n";
        for line in stderr.split_inclusive('\n') {
            writer.emit(line.as_bytes());
        }
        assert_eq!(error.take().as_deref(), Some("ValueError: no total"));
        let levels: Vec<(Level, String)> = channel.captured().into_iter().map(|l| (l.level, l.message)).collect();
        let at = |level| levels.iter().filter(|(l, _)| *l == level).map(|(_, m)| m.as_str()).collect::<Vec<_>>();
        assert_eq!(at(Level::Debug).len(), 3, "the panic report: {levels:?}");
        assert!(at(Level::Debug)[0].starts_with("thread '<unnamed>' panicked"));
        assert!(at(Level::Warn).contains(&"ValueError: no total"));
        assert!(at(Level::Warn).contains(&"later"), "lines after the report are kept: {levels:?}");
    }

    #[test]
    fn suppressed_lines_are_reported_at_most_once_per_interval() {
        let rate = LogRate { lines_per_sec: 1, burst: 1 };
        let channel = LogChannel::new(SinkLabel::new("source", "sink"), rate, false);
        for _ in 0..100 {
            channel.emit(Level::Info, "line");
        }
        assert_eq!(channel.suppressed_total(), 99);
        assert_eq!(channel.report_suppressed(), Some(99));
        for _ in 0..50 {
            channel.emit(Level::Info, "line");
            assert_eq!(channel.report_suppressed(), None, "one report per interval, not one per delivery");
        }
        // The bucket may have refilled a token meanwhile.
        let since = channel.suppressed_total() - 99;
        assert!(since >= 49, "suppressed {since}");
        std::thread::sleep(REPORT_EVERY);
        assert_eq!(channel.report_suppressed(), Some(since), "the next report covers every line since the last");
        assert_eq!(channel.report_suppressed(), None, "nothing new to report");
    }
}
