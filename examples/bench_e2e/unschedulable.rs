//! Time to report unschedulable: a gang that cannot fit, created once the scheduler has
//! synced; the seconds until all its pods carry `PodScheduled=False`.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::objects::{self, GANG_LABEL, NodeSet, create_all, create_namespace};
use crate::report::Row;
use crate::sched::{self, Scheduler};
use crate::{Bench, Progress};

const GANG: &str = "stuck";
const PODS: usize = 8;
/// More than any node has (16).
const GPUS: u32 = 32;

fn reported(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"))
}

pub async fn run(
    b: &Bench,
    nodes: &NodeSet,
    scheduler: Scheduler,
    ns: &str,
    progress: Progress,
) -> Result<Row, String> {
    let label = format!("unschedulable gang / {}", scheduler.label());
    let deadline = Instant::now() + b.budget;
    let mut row = Row::new("unschedulable gang", scheduler.label());
    create_namespace(&b.client, ns).await?;
    let scheduler_name = format!("sched-{ns}");
    progress.phase(b, &label, "starting the scheduler and binding a warm-up pod");
    let pid = sched::start(b, scheduler, &scheduler_name, nodes)?;
    progress.pid(Some(pid));
    let sync = sched::warm_up(b, ns, &scheduler_name, nodes, pid, deadline).await?;

    progress.phase(b, &label, &format!("creating a gang of {PODS} pods of {GPUS} GPUs"));
    let pods: Api<Pod> = Api::namespaced(b.client.clone(), ns);
    let created_at = Instant::now();
    objects::create_gangs(&b.client, ns, scheduler, &[GANG.to_string()], PODS as i32, deadline).await?;
    let gang: Vec<Pod> = (0..PODS)
        .map(|i| {
            let mut pod = objects::pod(nodes, &scheduler_name, &format!("{GANG}-{i}"), GPUS, &[]);
            objects::join_gang(&mut pod, Some(scheduler), GANG);
            pod
        })
        .collect();
    create_all(&pods, gang, deadline).await?;
    let selector = ListParams::default().labels(&format!("{GANG_LABEL}={GANG}"));
    let mut count = 0;
    let mut bound = 0;
    while Instant::now() < deadline && sched::running(pid) {
        if let Ok(list) = pods.list(&selector).await {
            count = list.items.iter().filter(|p| reported(p)).count();
            bound = list.items.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()).count();
            if count == PODS {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seconds = created_at.elapsed().as_secs_f64();
    // kube-scheduler marks the PodGroup too, around the same time: give it 3 s to show.
    let mut marked = None;
    if scheduler.is_kube() {
        let until = Instant::now() + Duration::from_secs(3);
        loop {
            marked = objects::kube_groups_marked(&b.client, ns).await;
            if marked.is_some_and(|(_, unschedulable, _)| unschedulable > 0) || Instant::now() >= until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    row.cpu = sched::cpu_seconds(pid);
    row.peak_mib = sched::peak_mib(pid);
    let exited = !sched::running(pid);
    sched::finish(b, pid, &scheduler_name).await;
    progress.pid(None);
    row.bound = format!("{bound}/{PODS}");
    row.time = Some(seconds);
    row.detail = format!("{count}/{PODS} pods PodScheduled=False; synced (warm-up pod bound) in {sync:.1} s");
    if let Some((_, unschedulable, groups)) = marked {
        row.detail += &format!("; {unschedulable}/{groups} PodGroup PodGroupInitiallyScheduled=False");
    }
    if exited {
        b.say(format!("{label}: the scheduler exited; its log ends:\n{}", sched::log_tail(b, &scheduler_name)));
        row.note = "the scheduler exited (its log on stderr)".into();
    } else if count < PODS {
        row.note = format!("over budget ({} s)", b.budget.as_secs());
    }
    Ok(row)
}
