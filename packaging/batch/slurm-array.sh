#!/bin/bash
# A Slurm job array that scans and reports on a checkpoint folder in 8 shards
# (docs/batch-jobs.md). Submit with `sbatch packaging/batch/slurm-array.sh /data/checkpoints`;
# a task that is requeued after preemption skips the files it already finished. When every
# task is done, one report from all shards (by hand, or `sbatch --dependency=afterany:JOBID
# --wrap "..."`):
#   ckpt-inspector merge results/report-*.jsonl -o fleet.html
#SBATCH --job-name=ckpt-report
#SBATCH --array=0-7
#SBATCH --cpus-per-task=4
#SBATCH --mem=16G
#SBATCH --requeue
#SBATCH --output=results/report-%a.log
set -euo pipefail

folder=${1:?usage: sbatch slurm-array.sh FOLDER}
shards=$(( SLURM_ARRAY_TASK_MAX + 1 ))
mkdir -p results
# exit 1-3 is what report found (suspicious, dangerous, not scannable), not a failed task
ckpt-inspector report "$folder" \
    -o "results/report-${SLURM_ARRAY_TASK_ID}.json" --force -q \
    --jobs "${SLURM_CPUS_PER_TASK:-1}" \
    --shard "${SLURM_ARRAY_TASK_ID}/${shards}" \
    --results "results/report-${SLURM_ARRAY_TASK_ID}.jsonl" || [ $? -le 3 ]
