#pragma once
// Shared by EarlyStopping and ModelCheckpoint: whether a monitored value improves upwards.
#include <string>

namespace lockstep::keras::callbacks {

// mode "max" / "min", or "auto": max for monitors ending in acc, accuracy or auc. Throws
// InvalidArgument (naming `who`) for another mode.
bool monitor_maximizes(const std::string& mode, const std::string& monitor, const char* who);

}  // namespace lockstep::keras::callbacks
