//! A job trace: one row a job, as a CSV file with a header (docs/simulator.md describes
//! the format). Columns are found by name, so their order does not matter and columns the
//! replay does not read may be present.

use std::io::{Read, Write};

use crate::quantity::Quantity;

/// One job of a trace: `workers` pods, each asking for `gpus` GPUs (or a fraction of one),
/// placed together or not at all.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceJob {
    pub id: String,
    /// Seconds from the trace's start.
    pub submit: i64,
    pub workers: usize,
    /// Whole GPUs per worker.
    pub gpus: u32,
    /// A share of one GPU per worker, when the worker asks for a fraction (0 < f < 1).
    pub gpu_fraction: Option<f64>,
    /// Per worker, in millicores.
    pub cpu_milli: i64,
    /// Per worker, in bytes.
    pub memory: i64,
    /// How long it runs once started, in seconds.
    pub runtime: i64,
    /// The runtime limit it declares (its pods' `activeDeadlineSeconds`), if any: it is
    /// stopped there if it runs longer.
    pub limit: Option<i64>,
    /// The team or queue it was submitted by, for the report.
    pub queue: String,
    pub priority: i32,
    /// The GPU model it must run on (the node label `nvidia.com/gpu.product`), if any.
    pub gpu_model: Option<String>,
}

impl TraceJob {
    /// GPUs the job holds while it runs, a fractional worker counted as one GPU.
    pub fn total_gpus(&self) -> u32 {
        self.workers as u32 * self.gpus_per_worker()
    }

    /// What each worker takes on a node: its whole GPUs, or one for a fraction.
    pub fn gpus_per_worker(&self) -> u32 {
        if self.gpu_fraction.is_some() { self.gpus.max(1) } else { self.gpus }
    }
}

/// The columns, in the order a written trace has them.
pub const COLUMNS: [&str; 12] = [
    "id",
    "submit",
    "workers",
    "gpus",
    "gpu_fraction",
    "cpu",
    "memory",
    "runtime",
    "limit",
    "queue",
    "priority",
    "gpu_model",
];

/// Columns a trace must have; the others may be missing or empty.
const REQUIRED: [&str; 5] = ["id", "submit", "workers", "gpus", "runtime"];

/// Reads a trace; `source` names it in errors. Jobs come back in submission order (rows
/// submitted at the same second keep their order in the file).
pub fn read(input: impl Read, source: &str) -> Result<Vec<TraceJob>, String> {
    let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).comment(Some(b'#')).from_reader(input);
    let header = reader.headers().map_err(|e| format!("{source}: cannot read the header: {e}"))?.clone();
    let column = |name: &str| header.iter().position(|h| h.eq_ignore_ascii_case(name));
    let missing: Vec<&str> = REQUIRED.iter().copied().filter(|c| column(c).is_none()).collect();
    if !missing.is_empty() {
        return Err(format!(
            "{source}: the header lacks the column(s) {}; a trace needs {} (and may have {})",
            missing.join(", "),
            REQUIRED.join(", "),
            COLUMNS.iter().filter(|c| !REQUIRED.contains(c)).copied().collect::<Vec<_>>().join(", ")
        ));
    }
    let at: Vec<Option<usize>> = COLUMNS.iter().map(|c| column(c)).collect();
    let mut jobs = Vec::new();
    for (row, record) in reader.records().enumerate() {
        let record = record.map_err(|e| format!("{source}: {e}"))?;
        let line = record.position().map_or(row as u64 + 2, |p| p.line());
        let cell = |i: usize| at[i].and_then(|c| record.get(c)).filter(|v| !v.is_empty());
        let id = cell(0).unwrap_or_default().to_string();
        let place = |column: usize, problem: String| {
            format!("{source}, line {line} (job {id:?}): {}: {problem}", COLUMNS[column])
        };
        let whole = |i: usize, min: i64| -> Result<Option<i64>, String> {
            cell(i)
                .map(|v| match v.parse::<f64>() {
                    Ok(n) if n.fract() == 0.0 && n >= min as f64 && n < 1e15 => Ok(n as i64),
                    _ => Err(place(i, format!("{v:?} is not a whole number of at least {min}"))),
                })
                .transpose()
        };
        if id.is_empty() {
            return Err(format!("{source}, line {line}: id: every job needs an id"));
        }
        let need = |i: usize, min: i64| whole(i, min)?.ok_or_else(|| place(i, "missing".into()));
        let gpu_fraction = cell(4)
            .map(|v| match v.parse::<f64>() {
                Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
                _ => Err(place(4, format!("{v:?} is not a share of one GPU (above 0, at most 1)"))),
            })
            .transpose()?
            .filter(|f| *f < 1.0);
        let quantity = |i: usize, to: fn(Quantity) -> i64| -> Result<i64, String> {
            cell(i).map_or(Ok(0), |v| {
                Quantity::parse(v)
                    .ok()
                    .filter(|q| q.sign() >= 0)
                    .map(to)
                    .ok_or_else(|| place(i, format!("{v:?} is not a Kubernetes quantity such as 4, 500m or 32Gi")))
            })
        };
        let priority = whole(10, i32::MIN as i64)?.unwrap_or(0);
        jobs.push(TraceJob {
            submit: need(1, 0)?,
            workers: need(2, 1)? as usize,
            gpus: u32::try_from(need(3, 0)?).map_err(|_| place(3, "too many".into()))?,
            gpu_fraction,
            cpu_milli: quantity(5, Quantity::milli_ceil)?,
            memory: quantity(6, Quantity::units_ceil)?,
            runtime: need(7, 1)?,
            limit: whole(8, 1)?,
            queue: cell(9).unwrap_or("default").to_string(),
            priority: i32::try_from(priority).map_err(|_| place(10, "out of range".into()))?,
            gpu_model: cell(11).map(str::to_string),
            id,
        });
    }
    jobs.sort_by_key(|j| j.submit);
    Ok(jobs)
}

/// Writes `jobs` as a trace with every column.
pub fn write(jobs: &[TraceJob], output: impl Write) -> Result<(), String> {
    let mut writer = csv::Writer::from_writer(output);
    let fail = |e: csv::Error| format!("cannot write the trace: {e}");
    writer.write_record(COLUMNS).map_err(fail)?;
    for job in jobs {
        let fraction = job.gpu_fraction.map(|f| f.to_string()).unwrap_or_default();
        let limit = job.limit.map(|l| l.to_string()).unwrap_or_default();
        writer
            .write_record([
                job.id.as_str(),
                &job.submit.to_string(),
                &job.workers.to_string(),
                &job.gpus.to_string(),
                &fraction,
                &format!("{}m", job.cpu_milli),
                &job.memory.to_string(),
                &job.runtime.to_string(),
                &limit,
                &job.queue,
                &job.priority.to_string(),
                job.gpu_model.as_deref().unwrap_or(""),
            ])
            .map_err(fail)?;
    }
    writer.flush().map_err(|e| format!("cannot write the trace: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_reads_by_column_name_with_optional_columns_left_out() {
        let text = "runtime,id,workers,gpus,submit,queue,cpu,memory,limit\n\
                    3600,b,2,8,60,ml,8,64Gi,7200\n\
                    600,a,1,1,0,,500m,,\n";
        let jobs = read(text.as_bytes(), "t.csv").unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[0].id.as_str(), jobs[0].submit, jobs[0].queue.as_str()), ("a", 0, "default"));
        assert_eq!((jobs[0].cpu_milli, jobs[0].memory, jobs[0].limit), (500, 0, None));
        assert_eq!((jobs[1].workers, jobs[1].gpus, jobs[1].cpu_milli), (2, 8, 8000));
        assert_eq!((jobs[1].memory, jobs[1].limit, jobs[1].queue.as_str()), (64 << 30, Some(7200), "ml"));
        assert_eq!(jobs[1].total_gpus(), 16);
    }

    #[test]
    fn a_bad_cell_names_the_file_line_job_and_column() {
        let text = "id,submit,workers,gpus,runtime\nok,0,1,1,60\nbad,5,two,1,60\n";
        let error = read(text.as_bytes(), "t.csv").unwrap_err();
        assert_eq!(error, "t.csv, line 3 (job \"bad\"): workers: \"two\" is not a whole number of at least 1");
        let error = read("id,submit,gpus\n".as_bytes(), "t.csv").unwrap_err();
        assert!(error.starts_with("t.csv: the header lacks the column(s) workers, runtime"), "{error}");
        let error = read("id,submit,workers,gpus,runtime,gpu_fraction\nf,0,1,0,60,1.5\n".as_bytes(), "t.csv");
        assert!(error.unwrap_err().contains("gpu_fraction: \"1.5\" is not a share of one GPU"));
    }

    #[test]
    fn a_written_trace_reads_back_the_same() {
        let job = TraceJob {
            id: "j-1".into(),
            submit: 30,
            workers: 4,
            gpus: 0,
            gpu_fraction: Some(0.25),
            cpu_milli: 1500,
            memory: 8 << 30,
            runtime: 900,
            limit: Some(1800),
            queue: "team-a".into(),
            priority: -5,
            gpu_model: Some("NVIDIA-H100-80GB-HBM3".into()),
        };
        let mut out = Vec::new();
        write(std::slice::from_ref(&job), &mut out).unwrap();
        assert_eq!(read(out.as_slice(), "w.csv").unwrap(), vec![job.clone()]);
        assert_eq!(job.total_gpus(), 4, "a fractional worker holds one GPU in the replay");
    }
}
