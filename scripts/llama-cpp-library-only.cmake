# Included by llama.cpp's project() when scripts/install-peers.sh builds llama-cpp-python
# (CMAKE_PROJECT_llama.cpp_INCLUDE): the Python bindings load only libllama and libggml*,
# but llama-cpp-python forces llama.cpp's common library on, and with it cpp-httplib —
# half of the build. llama-cpp-python turns it off itself for its WebAssembly build.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp common library: not used by the bindings" FORCE)
