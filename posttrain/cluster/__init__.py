"""Several processes: data parallelism as a role sees it (`parallel`), FSDP2 sharding of a role's
model (`fsdp`), and placing roles on processes and devices."""
