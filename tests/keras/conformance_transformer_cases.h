#pragma once
// The conformance cases of the transformer layers (MultiHeadAttention, GlobalAveragePooling1D,
// PositionEmbedding), run by conformance_layers_test.cpp with every other layer's.
#include <vector>

#include "conformance.h"

namespace lockstep::keras::conformance {

std::vector<LayerCase> transformer_layer_cases();

}  // namespace lockstep::keras::conformance
