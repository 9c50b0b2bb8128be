#include "store_access.h"

namespace dlion::cli {

QTextStream &stdOut()
{
    static QTextStream s(stdout);
    return s;
}

QTextStream &stdErr()
{
    static QTextStream s(stderr);
    return s;
}

void addStoreOption(QCommandLineParser &parser)
{
    parser.addOption({QStringLiteral("store"),
                      QStringLiteral("Run store file (default: $DLION_STORE, else %1).").arg(core::RunStore::defaultPath()),
                      QStringLiteral("PATH")});
}

bool openStore(const QString &command, const QCommandLineParser &parser, core::RunStore::Mode mode,
               core::RunStore &store, int *exitCode)
{
    const QString path = parser.isSet(QStringLiteral("store")) ? parser.value(QStringLiteral("store"))
                                                                : core::RunStore::defaultPath();
    if (store.open(path, mode))
        return true;
    stdErr() << "dlion " << command << ": " << store.errorString() << "\n";
    *exitCode = 1;
    return false;
}

std::optional<qint64> resolveRun(const QString &command, core::RunStore &store, const QString &text, int *exitCode)
{
    const auto id = store.resolve(text);
    if (!id) {
        stdErr() << "dlion " << command << ": " << store.errorString() << "\n";
        *exitCode = store.error() == core::RunStore::Error::UnknownRun ? 2 : 1;
    }
    return id;
}

} // namespace dlion::cli
