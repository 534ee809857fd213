#pragma once
// Umbrella header of the distribute layer: devices and cluster resolvers, strategies and their
// training step (ReplicatedStep on a TaskPool), distributed datasets and the collectives.
#include "lockstep/distribute/background_reducer.h"
#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/distributed_dataset.h"
#include "lockstep/distribute/failure.h"
#include "lockstep/distribute/input_context.h"
#include "lockstep/distribute/mpi_context.h"
#include "lockstep/distribute/multi_worker_strategy.h"
#include "lockstep/distribute/per_replica.h"
#include "lockstep/distribute/replica_context.h"
#include "lockstep/distribute/replicated_step.h"
#include "lockstep/distribute/shared_memory_group.h"
#include "lockstep/distribute/strategies.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/task_pool.h"
#include "lockstep/distribute/topology.h"
