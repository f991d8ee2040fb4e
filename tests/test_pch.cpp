// The object that makes the test programs' precompiled header (tests/CMakeLists.txt, KDIST_TEST_PCH).
