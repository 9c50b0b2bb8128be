#pragma once
// Writing and reading files the product owns without trusting what is on
// disk: no symlink followed, no FIFO waited on, no size taken on faith.
#include <QByteArray>
#include <QString>

#include <optional>

namespace dlion::files {

// Replaces `path` with `bytes`, owner-only (0600): writes a temporary with an
// unpredictable name in the same folder (created O_EXCL|O_NOFOLLOW, so a
// planted link is never followed), syncs it and renames it over `path`; a
// link at `path` is replaced, not followed. On failure the previous file is
// untouched, the temporary removed, and *error names the file and the OS error.
bool writeAtomically(const QString &path, const QByteArray &bytes, QString *error);

// Opens `path` read-only, refusing (with *error naming it) anything but a
// regular file: a FIFO, device or directory. Never blocks on a FIFO. Returns
// the descriptor (the caller closes it) or -1.
int openRegular(const QString &path, QString *error);

// The whole of the regular file `path`, refused when more than `maxBytes`
// are actually read (stat's size is not trusted).
std::optional<QByteArray> readRegular(const QString &path, qint64 maxBytes, QString *error);

// The SHA-256 of the regular file `path` as 64 lowercase hex digits, read
// in chunks (a model may be large); nullopt with *error naming the file.
std::optional<QString> sha256Hex(const QString &path, QString *error);

} // namespace dlion::files
