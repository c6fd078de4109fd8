module github.com/crin-dev/crin/test/critest/tools

go 1.26.6

require sigs.k8s.io/cri-tools v1.37.0
