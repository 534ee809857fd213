#pragma once
// Umbrella header of keras.callbacks.
#include "lockstep/keras/callbacks/backup_and_restore.h"
#include "lockstep/keras/callbacks/callback.h"
#include "lockstep/keras/callbacks/csv_logger.h"
#include "lockstep/keras/callbacks/early_stopping.h"
#include "lockstep/keras/callbacks/history.h"
#include "lockstep/keras/callbacks/learning_rate_scheduler.h"
#include "lockstep/keras/callbacks/model_checkpoint.h"
#include "lockstep/keras/callbacks/profiler.h"
#include "lockstep/keras/callbacks/progbar_logger.h"
#include "lockstep/keras/callbacks/terminate_on_nan.h"
