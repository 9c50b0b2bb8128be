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

// The group a collective or transfer ran in broke: a peer died, timed out,
// or the group is being re-formed. The worker can regroup and go on.
class GroupBrokenError : public EngineError {
public:
    using EngineError::EngineError;
};

} // namespace dlion::engine
