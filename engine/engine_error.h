#pragma once

#include <stdexcept>
#include <string>

namespace dlion::engine {

// An error the user can fix (missing dataset, bad option, lost peer). The
// message names the thing and what to do; it is shown as-is.
class EngineError : public std::runtime_error {
public:
    explicit EngineError(const std::string &message) : std::runtime_error(message) {}
};

} // namespace dlion::engine
