#!/usr/bin/env bash
# Starts a single-node Slurm cluster on 127.0.0.1 for the sweep tests: munged, slurmctld and
# slurmd from Debian's packages, with two fake GPUs in gres. Installs the packages when missing
# (needs root). Usage: start-local-slurm.sh DIR — writes DIR/slurm.conf (export SLURM_CONF to
# use it) and the daemons' state under DIR. Stop with stop-local-slurm.sh DIR.
set -euo pipefail
dir=$(realpath -m "$1")
mkdir -p "$dir/state" "$dir/spool" "$dir/log"

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! command -v sbatch >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q slurmd slurmctld slurm-client munge >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null && apt-get install -y -q slurmd slurmctld slurm-client munge >/dev/null; }
fi

# munge: a key, its socket folder (mode 711 so every user can reach the socket), the daemon.
install -d -o munge -g munge -m 700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 711 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
fi
if ! munge -n >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
fi

# Two fake GPUs: Slurm needs device files for gres, and sets CUDA_VISIBLE_DEVICES from them.
for i in 0 1; do
    [ -e "/dev/nvidia$i" ] || mknod -m 666 "/dev/nvidia$i" c 195 "$i"
done

host=$(hostname -s)
cpus=$(nproc)
cat >"$dir/slurm.conf" <<CONF
ClusterName=trainlog-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job may start again once its credential expired: 10 s here, not the default 120 s.
AuthInfo=cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=1
ReturnToService=2
MinJobAge=3600
KillWait=5
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
cat >"$dir/gres.conf" <<CONF
Name=gpu File=/dev/nvidia[0-1]
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$dir/slurm.conf"
slurmd -f "$dir/slurm.conf"
for _ in $(seq 100); do
    state=$(sinfo -h -o %t 2>/dev/null || true)
    case "$state" in idle*|mix*|alloc*) echo "slurm is up: $SLURM_CONF"; exit 0 ;; esac
    sleep 0.2
done
echo "slurm did not come up; sinfo says: $(sinfo 2>&1)" >&2
tail -20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
exit 1
