"""The largest numbers and texts the scheduler accepts, stated once.

The spec parser, the API serializers, the forms and the model fields' validators all read these,
so a request is refused with the same bound wherever it comes in, long before a value reaches a
column it would overflow (a PostgreSQL integer ends at 2^31 - 1). The bounds are far above any
real job and far below what would hurt the scheduler: a 10^6-replica gang or 10,000 pod sets is
a mistake, not a workload."""

from __future__ import annotations

# A workload's shape.
MAX_POD_SETS = 16
MAX_REPLICAS = 4096  # replicas of one pod set
MAX_GPUS_PER_REPLICA = 64  # the largest node decides the real limit; this caps the number first
MAX_GPUS_PER_WORKLOAD = 32768  # GPUs asked (scheduling.usage.pod_sets_gpus), over all pod sets
# More than any accepted workload's Workload.gpus_asked: the bound of the size filters.
MAX_GPUS_ASKED = MAX_POD_SETS * MAX_REPLICAS * MAX_GPUS_PER_REPLICA
MAX_CPU_MILLICORES = 1_024_000  # 1,024 cores per replica
MAX_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB per replica
MAX_ACCEPTED_PRODUCTS = 16
MAX_PRODUCT_LENGTH = 64
MAX_POD_SET_NAME_LENGTH = 64
# What a pod set's containers run (the Kubernetes executor's Job). An OCI reference: a registry
# host, a repository of at most 255 characters, a tag of at most 128 and a digest fit well in 512.
MAX_IMAGE_LENGTH = 512
MAX_COMMAND_ARGS = 256
MAX_COMMAND_ARG_LENGTH = 4096
MAX_COMMAND_LENGTH = 65536  # all arguments together
MAX_WORKLOAD_NAME_LENGTH = 128  # Workload.name's column

# Durations in seconds: time limit, run time, checkpoint interval and checkpoint write.
MAX_SECONDS = 366 * 86400
# A job's own mean time between failures (checkpoint advice): from 6 minutes to ~114 years.
MIN_MTBF_HOURS = 0.1
MAX_MTBF_HOURS = 1_000_000.0

# Progress steps a job reports (a BIGINT column; no training loop gets near this).
MAX_STEP = 10**15

# GPUs in one queue quota or quota request (nominal, borrowing and lending limits).
MAX_QUOTA_GPUS = 1_000_000

# Free text a person writes, kept in full in the audit log and in e-mails.
MAX_JUSTIFICATION_LENGTH = 4000
MAX_COMMENT_LENGTH = 2000  # review comments, cancel and drain reasons

# Idempotency-Key header of a workload submission.
MAX_IDEMPOTENCY_KEY_LENGTH = 128
IDEMPOTENCY_WINDOW_SECONDS = 24 * 3600
