#pragma once
// Umbrella header of the distribute layer: devices and cluster resolvers, strategies, distributed
// datasets and the collectives; of the training step, its statistics and the optimizer's contract
// (sync_stats.h says why the engine itself is internal).
#include "lockstep/distribute/background_reducer.h"
#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/collective.h"
#include "lockstep/distribute/distributed_dataset.h"
#include "lockstep/distribute/elementwise_update.h"
#include "lockstep/distribute/failure.h"
#include "lockstep/distribute/input_context.h"
#include "lockstep/distribute/mpi_context.h"
#include "lockstep/distribute/multi_worker_strategy.h"
#include "lockstep/distribute/per_replica.h"
#include "lockstep/distribute/profiler.h"
#include "lockstep/distribute/replica_context.h"
#include "lockstep/distribute/shared_memory_group.h"
#include "lockstep/distribute/strategies.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/sync_stats.h"
#include "lockstep/distribute/topology.h"
