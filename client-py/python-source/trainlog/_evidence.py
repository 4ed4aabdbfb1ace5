"""What a SIGTERM means, from evidence: a spot instance, Slurm's job state, the pod's disruption
condition on Kubernetes, or the cloud's own interruption notice; without any, someone cancelled
the run."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

#: Where Kubernetes mounts a pod's service account (token, namespace, ca.crt).
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")

#: What each reason of a pod's `DisruptionTarget` condition says happened (Kubernetes 1.26+).
DISRUPTIONS = {
    "PreemptionByScheduler": "the scheduler preempted it for a pod of higher priority",
    "DeletionByTaintManager": "its node was tainted NoExecute (unreachable, or being drained)",
    "EvictionByEvictionAPI": "it was evicted (a node drain, or the eviction API)",
    "DeletionByPodGC": "its node is gone",
    "TerminationByKubelet": "the kubelet stopped it (node pressure, or the node shutting down)",
}

#: Where a cloud's VMs read their own metadata.
METADATA = "http://169.254.169.254"
GCE_METADATA = "http://metadata.google.internal"

End = Tuple[str, str]


def slurm_job_state(job_id: str) -> Optional[str]:
    """Slurm's state of job `job_id` (`PREEMPTED`, `CANCELLED`, ...), or None when Slurm does not say."""
    try:
        shown = subprocess.run(
            ["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True, timeout=2
        )
    except (OSError, subprocess.SubprocessError):
        return None
    for field in shown.stdout.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return None


def pod_end(pod: Mapping[str, Any]) -> Optional[End]:
    """The end a pod object (as the API server answers it) gives a SIGTERM: `preempted` when
    Kubernetes marked it `DisruptionTarget`, `killed` when it is being deleted without one."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            reason = str(condition.get("reason") or "")
            meaning = DISRUPTIONS.get(reason, "Kubernetes disrupted it")
            return "preempted", f"SIGTERM; Kubernetes marked the pod DisruptionTarget ({reason}): {meaning}"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "killed", "SIGTERM; Kubernetes is deleting the pod with no disruption condition (someone deleted it)"
    return None


def kubernetes_pod(env: Mapping[str, str]) -> Tuple[Optional[Dict[str, Any]], str]:
    """This pod as the API server shows it, read with the pod's service account (which needs
    `get` on pods; mounted at the standard path, else where TRAINLOG_KUBERNETES_SERVICE_ACCOUNT
    says); (None, why) when it cannot be read."""
    host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
    if not host:
        return None, "not on Kubernetes"
    account = Path(env.get("TRAINLOG_KUBERNETES_SERVICE_ACCOUNT", "").strip() or SERVICE_ACCOUNT)
    port = env.get("KUBERNETES_SERVICE_PORT", "443").strip() or "443"
    try:
        token = (account / "token").read_text().strip()
        namespace = (account / "namespace").read_text().strip()
        context = ssl.create_default_context(cafile=str(account / "ca.crt"))
    except (OSError, ssl.SSLError) as e:
        return None, f"no service account to ask Kubernetes with ({e})"
    pod = env.get("TRAINLOG_POD_NAME", "").strip() or socket.gethostname()
    address = f"[{host}]" if ":" in host else host
    request = urllib.request.Request(
        f"https://{address}:{port}/api/v1/namespaces/{namespace}/pods/{pod}",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=2) as answer:
            return json.load(answer), ""
    except urllib.error.HTTPError as e:
        return None, f"Kubernetes answered {e.code} for pod {namespace}/{pod} (its service account needs `get` on pods)"
    except (OSError, ValueError) as e:
        return None, f"Kubernetes did not answer ({e})"


def _get(url: str, headers: Dict[str, str], method: str = "GET", timeout: float = 1.0) -> Optional[str]:
    request = urllib.request.Request(url, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


def cloud_vendor(dmi: Path = Path("/sys/class/dmi/id")) -> str:
    """The machine's maker as its firmware says (`Amazon EC2`, `Google`, `Microsoft Corporation`)."""
    for name in ("sys_vendor", "board_vendor"):
        try:
            vendor = (dmi / name).read_text().strip()
        except OSError:
            continue
        if vendor:
            return vendor
    return ""


def cloud_notice(vendor: str, metadata: str = METADATA, gce_metadata: str = GCE_METADATA) -> Optional[str]:
    """The cloud's own notice that this VM is being taken back, asked of its metadata service;
    None on a machine of no known cloud, or when there is none."""
    if vendor == "Amazon EC2":
        token = _get(f"{metadata}/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "60"}, "PUT")
        headers = {"X-aws-ec2-metadata-token": token} if token else {}
        action = _get(f"{metadata}/latest/meta-data/spot/instance-action", headers)
        if action:
            try:
                notice = json.loads(action)
            except ValueError:
                return None
            if isinstance(notice, dict) and notice.get("action"):
                return f"AWS spot interruption notice: {notice['action']} at {notice.get('time', '?')}"
    elif vendor == "Google":
        preempted = _get(f"{gce_metadata}/computeMetadata/v1/instance/preempted", {"Metadata-Flavor": "Google"})
        if preempted is not None and preempted.strip().upper() == "TRUE":
            return "GCE says the instance was preempted"
    elif vendor == "Microsoft Corporation":
        events = _get(f"{metadata}/metadata/scheduledevents?api-version=2020-07-01", {"Metadata": "true"})
        try:
            listed = json.loads(events or "{}").get("Events") or []
        except (ValueError, AttributeError):
            return None
        for event in listed:
            if isinstance(event, dict) and event.get("EventType") == "Preempt":
                return f"Azure scheduled event Preempt, not before {event.get('NotBefore', '?')}"
    return None


def sigterm_end(job: Mapping[str, Any], env: Optional[Mapping[str, str]] = None) -> End:
    """How a SIGTERM ends a run of the job `job` (`Run.job`), and the evidence: `preempted` only
    where something says it is a preemption (a spot instance, Slurm's job state, the pod's
    disruption condition, the cloud's interruption notice), else `killed` (someone cancelled
    it: `scancel`, `kubectl delete`, `kill`). The server turns a `killed` end into `preempted`
    when the job's launcher starts it again (a requeue, torchelastic after a lost node, a
    SkyPilot recovery)."""
    env = os.environ if env is None else env
    if job.get("spot") is True:
        return "preempted", "SIGTERM on a spot instance"
    slurm_job = env.get("SLURM_JOB_ID", "").strip()
    state = slurm_job_state(slurm_job) if slurm_job else None
    if state is not None and state.startswith(("PREEMPTED", "REQUEUE")):
        return "preempted", f"SIGTERM; Slurm says the job is {state}"
    if state is not None:
        return "killed", f"SIGTERM; Slurm says the job is {state}, not preempted"
    pod, unread = kubernetes_pod(env)
    if pod is not None:
        ended = pod_end(pod)
        if ended is not None:
            return ended
    notice = cloud_notice(cloud_vendor())
    if notice is not None:
        return "preempted", f"SIGTERM; {notice}"
    if env.get("KUBERNETES_SERVICE_HOST"):
        why = unread or "the pod has no disruption condition"
        return "killed", f"SIGTERM; nothing says it was a preemption ({why})"
    return "killed", "SIGTERM; nothing says it was a preemption (not a spot instance, no launcher said so)"
