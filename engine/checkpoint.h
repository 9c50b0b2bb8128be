#pragma once

#include <QString>

#include <cstdint>
#include <vector>

namespace dlion::engine {

// One worker's training state at the end of a round. The format (version 2,
// host byte order): magic "DLCKPT01", u32 version, u32 worker, i64 round,
// f64 elapsed seconds, u32 model-name length + bytes, u64 parameter count,
// the parameters and the momentum as float32, u64 buffer count and the
// floating-point buffers (BatchNorm statistics) as float32, and a CRC-32 of
// all before it. Version 1 files, without the buffers, still load.
struct Checkpoint {
    QString model;
    int worker = 0;
    std::int64_t round = 0;
    double elapsedS = 0;
    std::vector<float> params;
    std::vector<float> momentum;  // same length as params
    std::vector<float> buffers;   // empty in a version 1 file

    // Throws EngineError naming `path` when the file is unreadable,
    // truncated, of another format or fails its CRC.
    static Checkpoint load(const QString &path);
    // The newest checkpoint of `worker` in `dir`, or `path` itself when it
    // is a file. Throws EngineError when there is none.
    static QString latest(const QString &path, int worker);
};

// Writes a worker's checkpoints into one directory, owner-only, each through
// files::writeAtomically, so a failed write (disk full, no permission) leaves
// the previous checkpoints intact. Only the newest `keep`
// files of this worker stay.
class Checkpointer {
public:
    Checkpointer(QString dir, int worker, int keep);

    // Returns an empty string on success, else what failed (for a warning).
    QString save(const Checkpoint &c);
    static QString fileName(int worker, std::int64_t round);

private:
    QString m_dir;
    int m_worker;
    int m_keep;
};

} // namespace dlion::engine
