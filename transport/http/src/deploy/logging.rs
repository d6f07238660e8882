//! stderr's log: text for people or JSON for a collector, filtered by RUST_LOG.

/// The log line format on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// For people; colour only when stderr is a terminal.
    Text,
    /// For a log collector: one object per line.
    Json,
}

/// Held to the end of a serving process: dropping it writes out the lines still queued.
pub type LogGuard = tracing_appender::non_blocking::WorkerGuard;

/// The default of `--log-buffer-lines`: about 6 MB of lines of about 200 bytes, some
/// seconds of a busy service's request lines.
pub const LOG_BUFFER_LINES_DEFAULT: u32 = 32_768;

/// Logs on stderr in `format`, filtered by RUST_LOG (default `info`); colour only when
/// stderr is a terminal (a file or a pipe gets plain text). `serving`: the line count a
/// serving process's log queue holds at most (`None`: a one-shot command).
pub fn init_logging(format: LogFormat, serving: Option<u32>) -> Option<LogGuard> {
    use std::io::IsTerminal;
    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let (writer, guard) = match serving {
        Some(buffer_lines) => {
            assert!(buffer_lines >= 1, "the log queue holds at least one line");
            // The service writes a line per request: written where it is made, a reader of
            // stderr that stops (a stuck collector, a full pipe) would stop every worker
            // thread in `write` and with them the service (decision 212). A thread of its
            // own writes them from a bounded queue; what does not fit is dropped and counted.
            let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
                .buffered_lines_limit(buffer_lines as usize)
                .lossy(true)
                .thread_name("esim-log")
                .finish(std::io::stderr());
            let dropped = writer.error_counter();
            crate::metrics::count_log_drops(move || dropped.dropped_lines() as u64);
            (BoxMakeWriter::new(writer), Some(guard))
        }
        // A one-shot command: its few lines are written where they are made.
        None => (BoxMakeWriter::new(std::io::stderr), None),
    };
    let logs = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs.init(),
    }
    guard
}
