#pragma once

#include <QStringList>

namespace dlion::cli {

// `dlion deploy --cluster FILE`: installs, starts and checks an agent on every
// host (each must answer with a fresh run secret), then stops them again:
// a dry run of what `dlion run --cluster` does before training.
// `dlion stop --cluster FILE`: stops agents left on the hosts (e.g. by a
// controller that was killed) and removes their files.
// Exit status: 0 all hosts fine, 1 a host failed, 2 bad usage or cluster file.
class DeployCommand {
public:
    enum class Mode { Deploy, Stop };

    explicit DeployCommand(Mode mode) : m_mode(mode) {}
    int exec(const QStringList &args);

private:
    Mode m_mode;
};

} // namespace dlion::cli
