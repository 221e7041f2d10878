"""Several processes: data parallelism as a role sees it (`parallel`), FSDP2 sharding of a role's
model (`fsdp`), and placing roles on processes and devices."""

# How a launcher tells a worker process its place (read by `world.world_from_env`); kept here, free
# of torch, so `python -m posttrain` can tell a worker from a user's command without importing it.
RANK_ENV = "POSTTRAIN_RANK"
WORLD_ENV = "POSTTRAIN_WORLD_SIZE"
