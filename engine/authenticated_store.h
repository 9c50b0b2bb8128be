#pragma once

#include "data_plane_auth.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace dlion::engine {

// c10d's TCPStore authenticates no one and listens on every interface; this
// store speaks to an auth::StoreServer that answers only holders of the key.
class AuthenticatedStore : public c10d::Store {
public:
    AuthenticatedStore(const std::string &host, int port, const QByteArray &key, std::chrono::milliseconds timeout)
        : c10d::Store(timeout), m_client(host, port, key, timeout)
    {
    }
    void setTimeout(const std::chrono::milliseconds &timeout) override
    {
        c10d::Store::setTimeout(timeout);
        m_client.setTimeout(timeout);
    }
    void set(const std::string &key, const std::vector<std::uint8_t> &value) override { m_client.set(key, value); }
    std::vector<std::uint8_t> get(const std::string &key) override
    {
        m_client.wait({key}, timeout_);
        if (auto value = m_client.tryGet(key))
            return *value;
        throw std::runtime_error("rendezvous store: key " + key + " was deleted while waited for");
    }
    std::int64_t add(const std::string &key, std::int64_t value) override { return m_client.add(key, value); }
    bool deleteKey(const std::string &key) override { return m_client.remove(key); }
    bool check(const std::vector<std::string> &keys) override { return m_client.check(keys); }
    std::int64_t getNumKeys() override { return m_client.size(); }
    void wait(const std::vector<std::string> &keys) override { m_client.wait(keys, timeout_); }
    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override
    {
        m_client.wait(keys, timeout);
    }

private:
    auth::StoreClient m_client;
};

} // namespace dlion::engine
