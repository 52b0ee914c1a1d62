//! The windows of one db_bench run: its per-second rates (`--report_interval_seconds=1`,
//! the lines of its `--report_file`) and the process's CPU time, sampled while it ran, cut
//! into a **cold** window (the first `cold_secs` seconds), a **steady-state** window (the
//! last `steady_secs`) and the **warm-up** between them.
//!
//! Why: a user-space cache pays a first touch for every fresh page it caches (the arena's
//! memory is faulted in as it fills), the kernel's page cache pays its own allocation, and
//! a cache that has filled, or that holds the whole data, pays neither. A whole-run figure
//! mixes the two; the windows keep them apart, the steady state as the headline and the
//! cold start beside it.
//!
//! Alignment: db_bench writes its report file's header when the benchmark starts (after
//! the databases are open), then one line per second, `secs_elapsed,interval_qps`: the
//! reads of that second. The sampler ([`super::child::run_sampled`]) looks every
//! ~50 ms at how many complete lines the file has and at the process's CPU time
//! (`/proc/<pid>/stat`), the two together:
//!
//! ```text
//!   report file:  header          line 1          line 2           line 3
//!   written at:     |---------------|---------------|----------------|
//!   samples:      .  :  .  .  .  .  . :  .  .  .  .  . :  .  .  .  .  .  :
//!                    b0                 b1                b2                b3
//!   second k's CPU = cpu(b_k) - cpu(b_(k-1)), b_k = the first sample that saw line k
//! ```
//!
//! so that each second's CPU is measured over the same stretch as its rate, to within a
//! sampling period at each end (a window's ends, not each second's, are what its figure
//! depends on: the seconds inside it telescope). Opening the databases, before the header,
//! and closing them, after the last line, fall outside every second.
//!
//! A window's ops/s is the mean of its seconds' rates; its reads are the sum of the rates
//! (each over one second); its CPU per read (user, system: µs) is its CPU over its reads.
//!
//! Limits: when two lines are first seen by the same sample (the sampler did not run for
//! over a second), the first of their seconds holds the CPU of both and the second gets
//! none ([`SecondsCpu::merged_secs`] counts those): inside a window that changes nothing,
//! at a window's edge it moves a second's CPU across it. The seconds counted are those with
//! a rate and a CPU both: db_bench writes its last line about when its threads stop, and a
//! process that exits within a sampling period of it leaves that second's CPU unknown (the
//! rusage at exit includes closing the databases), so that second is left out, and the
//! steady window of one run may end a second before another's. db_bench's interval is one
//! second plus the time it takes to write a line (microseconds), and with `--duration=D`
//! it reports D seconds, or D - 1 when its threads stop before its D-th report.

use serde_json::{json, Map, Value};

/// One look at a running process: how many complete lines its report file had, and the
/// CPU time it had used, read one right after the other.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuSample {
    /// Seconds since the process was started.
    pub at_secs: f64,
    /// Complete (`\n`-ended) lines of the report file, its header included: 0 before the
    /// benchmark starts, `1 + k` once second k is reported.
    pub report_lines: usize,
    /// CPU time of all its threads so far (`utime`, `stime`).
    pub user_secs: f64,
    pub sys_secs: f64,
    /// Bytes its threads had read from the block layer so far (`read_bytes` of
    /// `/proc/<pid>/io`, as `ru_inblock` counts them: a page-cache hit reads none, a
    /// buffered miss its readahead, an O_DIRECT read its own bytes); 0 where unreadable.
    pub read_bytes: u64,
}

/// CPU time over a stretch.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cpu {
    pub user_secs: f64,
    pub sys_secs: f64,
}

/// The CPU of each second db_bench reported, in order: `secs[k - 1]` is second k's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SecondsCpu {
    pub secs: Vec<Cpu>,
    /// Seconds whose start and end lines were first seen by the same sample: they got no
    /// CPU, the second before them holds theirs.
    pub merged_secs: usize,
}

/// The CPU of each reported second, from samples in time order: second k's is the CPU
/// between the first sample that saw line k - 1 (line 0: the header) and the first that
/// saw line k. A second whose line no sample saw is not there.
pub fn cpu_per_second(samples: &[CpuSample]) -> SecondsCpu {
    let mut out = SecondsCpu::default();
    for pair in second_bounds(samples).windows(2) {
        let (from, to) = (&samples[pair[0]], &samples[pair[1]]);
        if pair[0] == pair[1] {
            out.merged_secs += 1;
        }
        out.secs.push(Cpu {
            user_secs: to.user_secs - from.user_secs,
            sys_secs: to.sys_secs - from.sys_secs,
        });
    }
    out
}

/// The bytes read from the block layer in each reported second, over the stretches
/// [`cpu_per_second`] gives each second its CPU: `reads[k - 1]` is second k's.
pub fn disk_reads_per_second(samples: &[CpuSample]) -> Vec<u64> {
    second_bounds(samples)
        .windows(2)
        .map(|pair| {
            samples[pair[1]]
                .read_bytes
                .saturating_sub(samples[pair[0]].read_bytes)
        })
        .collect()
}

/// `bounds[j]`: the index of the first sample that saw `j + 1` lines of the report file
/// (`j = 0`: the header), for as many lines as the samples saw.
fn second_bounds(samples: &[CpuSample]) -> Vec<usize> {
    let mut bounds: Vec<usize> = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        while bounds.len() < s.report_lines {
            bounds.push(i);
        }
    }
    bounds
}

/// How a run is cut: the first `cold_secs` seconds, the last `steady_secs`, the rest
/// between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowSpec {
    pub cold_secs: usize,
    pub steady_secs: usize,
}

impl WindowSpec {
    /// `--cold-secs`' default: the first ten seconds, the cold start the issue names.
    pub const COLD_SECS_DEFAULT: usize = 10;
    /// `--steady-secs`' default: the last twenty seconds.
    pub const STEADY_SECS_DEFAULT: usize = 20;

    /// The seconds a run needs for all three windows, the warm-up at least one.
    pub fn secs_min(self) -> usize {
        self.cold_secs + 1 + self.steady_secs
    }
}

/// The three windows' names, in time order, as the rows' keys spell them.
pub const WINDOW_NAMES: [&str; 3] = ["cold", "warmup", "steady"];

/// One window's figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// Its first and last second (1-based, both in it), as db_bench numbers its lines.
    pub first_sec: usize,
    pub last_sec: usize,
    /// The mean of its seconds' rates.
    pub ops_per_sec: f64,
    /// The reads of its seconds: the sum of their rates, each over one second.
    pub reads: f64,
    /// Its CPU time over its reads, in µs (NaN, a null in JSON, for no reads).
    pub user_us_per_read: f64,
    pub sys_us_per_read: f64,
}

impl Window {
    /// The window over seconds `first..=last` (1-based); `None` for an empty or
    /// out-of-range one.
    fn over(rates: &[f64], cpu: &[Cpu], first: usize, last: usize) -> Option<Window> {
        if first == 0 || first > last || last > rates.len().min(cpu.len()) {
            return None;
        }
        let rates = &rates[first - 1..last];
        let cpu = &cpu[first - 1..last];
        let reads: f64 = rates.iter().sum();
        let user: f64 = cpu.iter().map(|c| c.user_secs).sum();
        let sys: f64 = cpu.iter().map(|c| c.sys_secs).sum();
        let per_read = |secs: f64| {
            if reads > 0.0 {
                secs * 1e6 / reads
            } else {
                f64::NAN
            }
        };
        Some(Window {
            first_sec: first,
            last_sec: last,
            ops_per_sec: reads / rates.len() as f64,
            reads,
            user_us_per_read: per_read(user),
            sys_us_per_read: per_read(sys),
        })
    }
}

/// A run cut into its windows. A window the run is too short for is `None`: the cold one
/// needs `cold_secs` seconds, the steady one `cold_secs + steady_secs` (else it would hold
/// cold seconds), the warm-up at least one second between them. A window of 0 seconds
/// (`--cold-secs 0`) is `None` too.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Windows {
    /// The seconds with both a rate and a CPU figure: what was cut.
    pub secs: usize,
    pub cold: Option<Window>,
    pub warmup: Option<Window>,
    pub steady: Option<Window>,
}

impl Windows {
    /// Cuts the seconds that have both a rate (`rates[k - 1]`: db_bench's line k) and a
    /// CPU figure (`cpu[k - 1]`).
    pub fn of(rates: &[f64], cpu: &[Cpu], spec: WindowSpec) -> Windows {
        let n = rates.len().min(cpu.len());
        let cold = Window::over(rates, cpu, 1, spec.cold_secs);
        let steady_first = n.saturating_sub(spec.steady_secs) + 1;
        let steady = if steady_first > spec.cold_secs {
            Window::over(rates, cpu, steady_first, n)
        } else {
            None
        };
        let warmup = if steady.is_some() {
            Window::over(rates, cpu, spec.cold_secs + 1, steady_first - 1)
        } else {
            None
        };
        Windows {
            secs: n,
            cold,
            warmup,
            steady,
        }
    }

    /// The window of `name` (one of [`WINDOW_NAMES`]).
    pub fn get(&self, name: &str) -> Option<Window> {
        match name {
            "cold" => self.cold,
            "warmup" => self.warmup,
            "steady" => self.steady,
            _ => None,
        }
    }

    /// Every window's figures into a run's extras: `<window>_ops_per_sec`,
    /// `<window>_user_us_per_read`, `<window>_sys_us_per_read` (null where the run had no
    /// such window), and `windows_secs` (each window's first and last second).
    pub fn record(&self, extra: &mut Map<String, Value>) {
        let mut secs = Map::new();
        for name in WINDOW_NAMES {
            let w = self.get(name);
            extra.insert(
                format!("{name}_ops_per_sec"),
                json!(w.map(|w| w.ops_per_sec)),
            );
            extra.insert(
                format!("{name}_user_us_per_read"),
                json!(w.map(|w| w.user_us_per_read)),
            );
            extra.insert(
                format!("{name}_sys_us_per_read"),
                json!(w.map(|w| w.sys_us_per_read)),
            );
            secs.insert(
                name.to_string(),
                json!(w.map(|w| [w.first_sec, w.last_sec])),
            );
        }
        extra.insert("windows_secs".into(), Value::Object(secs));
        extra.insert("reported_secs".into(), json!(self.secs));
    }
}

/// `(utime, stime)` in clock ticks from the text of `/proc/<pid>/stat`: fields 14 and 15,
/// counted after the command name's closing parenthesis (the name may hold spaces and
/// parentheses).
pub fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let after = &text[text.rfind(')')? + 1..];
    let mut fields = after.split_whitespace().skip(11); // state is field 3
    let utime = fields.next()?.parse().ok()?;
    let stime = fields.next()?.parse().ok()?;
    Some((utime, stime))
}

/// `read_bytes` from the text of `/proc/<pid>/io` (its `read_bytes:` line).
pub fn parse_proc_io(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_secs: f64, report_lines: usize, user_secs: f64, sys_secs: f64) -> CpuSample {
        CpuSample {
            at_secs,
            report_lines,
            user_secs,
            sys_secs,
            read_bytes: 0,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn each_second_gets_the_cpu_between_the_samples_that_first_saw_its_ends() {
        // Opening (0.5 s of CPU before the header), then the header at the third sample;
        // line 1 first seen at the sixth, line 2 at the ninth (and again at the tenth).
        let samples = [
            sample(0.00, 0, 0.0, 0.0),
            sample(0.05, 0, 0.3, 0.2),
            sample(0.10, 1, 0.5, 0.25), // b0
            sample(0.50, 1, 0.9, 0.5),
            sample(1.00, 1, 1.2, 0.7),
            sample(1.12, 2, 1.5, 0.75), // b1: second 1 = 1.0 user, 0.5 sys
            sample(1.60, 2, 2.0, 1.0),
            sample(2.00, 2, 2.2, 1.1),
            sample(2.12, 3, 2.5, 1.25), // b2: second 2 = 1.0 user, 0.5 sys
            sample(2.20, 3, 2.6, 1.3),
        ];
        let c = cpu_per_second(&samples);
        assert_eq!(c.secs.len(), 2, "two lines after the header");
        assert_eq!(c.merged_secs, 0);
        for s in &c.secs {
            assert!(close(s.user_secs, 1.0) && close(s.sys_secs, 0.5), "{s:?}");
        }
        // No header seen: no second. Only the header: none either.
        assert!(cpu_per_second(&samples[..2]).secs.is_empty());
        assert!(cpu_per_second(&samples[..5]).secs.is_empty());
    }

    #[test]
    fn each_second_gets_the_disk_reads_between_the_same_samples_as_its_cpu() {
        let read = |at_secs, report_lines, read_bytes| CpuSample {
            read_bytes,
            ..sample(at_secs, report_lines, 0.0, 0.0)
        };
        // 4 KiB read while opening (before the header: no second's), then 8 KiB in
        // second 1 and none in second 2 (its set cached), whatever was read after the
        // last line the samples saw not counted.
        let samples = [
            read(0.0, 0, 0),
            read(0.1, 1, 4096),
            read(0.6, 1, 8192),
            read(1.1, 2, 12288),
            read(2.1, 3, 12288),
            read(2.2, 3, 16384),
        ];
        assert_eq!(disk_reads_per_second(&samples), vec![8192, 0]);
        assert!(disk_reads_per_second(&samples[..2]).is_empty());
    }

    #[test]
    fn parses_read_bytes_from_proc_io() {
        let io = "rchar: 100\nwchar: 7\nsyscr: 3\nsyscw: 1\nread_bytes: 8192\n\
                  write_bytes: 0\ncancelled_write_bytes: 0\n";
        assert_eq!(parse_proc_io(io), Some(8192));
        assert_eq!(parse_proc_io("rchar: 100\n"), None);
        let own = std::fs::read_to_string("/proc/self/io").expect("procfs");
        assert!(parse_proc_io(&own).is_some(), "{own}");
    }

    #[test]
    fn a_sampler_late_by_over_a_second_merges_two_seconds_into_the_first_one() {
        let samples = [
            sample(0.0, 1, 0.0, 0.0),
            sample(1.0, 2, 1.0, 0.0),
            // The sampler slept through line 2: lines 2 and 3 both first seen here.
            sample(3.1, 4, 3.0, 0.5),
            sample(4.0, 5, 4.0, 0.5),
        ];
        let c = cpu_per_second(&samples);
        let user: Vec<f64> = c.secs.iter().map(|s| s.user_secs).collect();
        // Second 2 (lines 1 to 2) ran until the sample that saw lines 2 and 3: it holds
        // seconds 2 and 3; second 3 has none.
        assert_eq!(user, vec![1.0, 2.0, 0.0, 1.0]);
        assert_eq!(c.merged_secs, 1);
    }

    /// Seconds 1..=n: second k at 1000·k reads/s, with 2 ms of user and 1 ms of system
    /// time per 1000 reads, except that the first 3 seconds cost twice as much.
    fn run_of(n: usize) -> (Vec<f64>, Vec<Cpu>) {
        let rates: Vec<f64> = (1..=n).map(|k| 1000.0 * k as f64).collect();
        let cpu = rates
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let cost = if i < 3 { 2.0 } else { 1.0 };
                Cpu {
                    user_secs: cost * 2e-6 * r,
                    sys_secs: cost * 1e-6 * r,
                }
            })
            .collect();
        (rates, cpu)
    }

    #[test]
    fn windows_are_the_first_the_last_and_what_lies_between() {
        let (rates, cpu) = run_of(10);
        let spec = WindowSpec {
            cold_secs: 3,
            steady_secs: 4,
        };
        let w = Windows::of(&rates, &cpu, spec);
        assert_eq!(w.secs, 10);
        let cold = w.cold.expect("cold");
        assert_eq!((cold.first_sec, cold.last_sec), (1, 3));
        // (1000 + 2000 + 3000) / 3 = 2000 ops/s; 6000 reads at 4 + 2 us each.
        assert!(close(cold.ops_per_sec, 2000.0), "{cold:?}");
        assert!(close(cold.reads, 6000.0));
        assert!(close(cold.user_us_per_read, 4.0) && close(cold.sys_us_per_read, 2.0));
        let warm = w.warmup.expect("warm-up");
        assert_eq!((warm.first_sec, warm.last_sec), (4, 6));
        assert!(close(warm.ops_per_sec, 5000.0), "{warm:?}");
        let steady = w.steady.expect("steady");
        assert_eq!((steady.first_sec, steady.last_sec), (7, 10));
        assert!(close(steady.ops_per_sec, 8500.0), "{steady:?}");
        assert!(close(steady.reads, 34000.0));
        assert!(close(steady.user_us_per_read, 2.0) && close(steady.sys_us_per_read, 1.0));
        assert_eq!(spec.secs_min(), 8);
    }

    #[test]
    fn a_window_counts_only_seconds_with_both_a_rate_and_a_cpu_figure() {
        // Eleven rates, ten CPU seconds (the last line seen only at exit): second 11 is
        // not counted, and the steady window ends at 10.
        let (mut rates, cpu) = run_of(10);
        rates.push(1e9);
        let w = Windows::of(
            &rates,
            &cpu,
            WindowSpec {
                cold_secs: 3,
                steady_secs: 4,
            },
        );
        assert_eq!(w.secs, 10);
        assert_eq!(w.steady.map(|s| s.last_sec), Some(10));
        assert!(close(w.steady.unwrap().ops_per_sec, 8500.0));
    }

    #[test]
    fn too_short_a_run_leaves_the_windows_it_cannot_fill_empty() {
        let spec = WindowSpec {
            cold_secs: 3,
            steady_secs: 4,
        };
        // 7 seconds: cold and steady would touch with no warm-up between them: the
        // steady one starts right after the cold one, so it is there; no warm-up.
        let (rates, cpu) = run_of(7);
        let w = Windows::of(&rates, &cpu, spec);
        assert!(w.cold.is_some() && w.steady.is_some(), "{w:?}");
        assert_eq!(w.steady.map(|s| s.first_sec), Some(4));
        assert!(w.warmup.is_none(), "{w:?}");
        // 6 seconds: the last four would hold cold second 3: no steady window.
        let (rates, cpu) = run_of(6);
        let w = Windows::of(&rates, &cpu, spec);
        assert!(w.cold.is_some(), "{w:?}");
        assert!(w.steady.is_none() && w.warmup.is_none(), "{w:?}");
        // 2 seconds: not even the cold window; nothing at all.
        let (rates, cpu) = run_of(2);
        let w = Windows::of(&rates, &cpu, spec);
        assert_eq!((w.cold, w.warmup, w.steady), (None, None, None));
        let mut extra = Map::new();
        w.record(&mut extra);
        assert_eq!(extra["steady_ops_per_sec"], Value::Null);
        assert_eq!(extra["cold_sys_us_per_read"], Value::Null);
        assert_eq!(extra["windows_secs"]["cold"], Value::Null);
        assert_eq!(extra["reported_secs"], json!(2));
        // No cold window asked for: the steady state and the warm-up before it.
        let (rates, cpu) = run_of(10);
        let w = Windows::of(
            &rates,
            &cpu,
            WindowSpec {
                cold_secs: 0,
                steady_secs: 4,
            },
        );
        assert_eq!(w.cold, None);
        assert_eq!(w.warmup.map(|s| (s.first_sec, s.last_sec)), Some((1, 6)));
        assert_eq!(w.steady.map(|s| (s.first_sec, s.last_sec)), Some((7, 10)));
        // Rates but no CPU (the sampler saw nothing): nothing either.
        let (rates, _) = run_of(10);
        assert_eq!(Windows::of(&rates, &[], spec).cold, None);
    }

    #[test]
    fn a_window_without_reads_has_no_cpu_per_read() {
        let rates = [0.0; 4];
        let cpu = [Cpu {
            user_secs: 1.0,
            sys_secs: 1.0,
        }; 4];
        let w = Windows::of(
            &rates,
            &cpu,
            WindowSpec {
                cold_secs: 1,
                steady_secs: 1,
            },
        );
        let cold = w.cold.expect("cold");
        assert_eq!(cold.ops_per_sec, 0.0);
        assert!(cold.user_us_per_read.is_nan());
        let mut extra = Map::new();
        w.record(&mut extra);
        assert_eq!(extra["cold_user_us_per_read"], Value::Null, "NaN is null");
        assert_eq!(extra["windows_secs"]["warmup"], json!([2, 3]));
    }

    #[test]
    fn parses_utime_and_stime_past_an_awkward_command_name() {
        let stat = "4242 (db bench) (x)) S 1 4242 4242 0 -1 4194560 9000 0 12 0 \
                    1234 567 0 0 20 0 33 0 100 200000000 5000 18446744073709551615";
        assert_eq!(parse_proc_stat(stat), Some((1234, 567)));
        assert_eq!(parse_proc_stat("4242 (x) S 1 2"), None);
        let own = std::fs::read_to_string("/proc/self/stat").expect("procfs");
        assert!(parse_proc_stat(&own).is_some(), "{own}");
    }
}
