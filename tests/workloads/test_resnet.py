import torch

from gcbench.workloads.resnet import count_parameters, resnet50


def test_resnet50_has_torchvision_parameter_count_with_10_classes():
    assert count_parameters(resnet50(num_classes=10, stem="imagenet")) == 23_528_522


def test_resnet50_with_1000_classes_matches_torchvision_resnet50():
    assert count_parameters(resnet50(num_classes=1000)) == 25_557_032


def test_cifar_stem_replaces_7x7_conv_by_3x3_and_drops_the_pool():
    model = resnet50(stem="cifar")
    assert count_parameters(model) == 23_528_522 - 7 * 7 * 3 * 64 + 3 * 3 * 3 * 64
    assert isinstance(model.maxpool, torch.nn.Identity)


def test_forward_gives_logits_per_image():
    model = resnet50().eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 10)
    stages = [len(getattr(model, f"layer{i}")) for i in range(1, 5)]
    assert stages == [3, 4, 6, 3]
    # v1.5: the down-sampling stride sits on the 3x3 conv of the first block
    assert model.layer2[0].conv2.stride == (2, 2) and model.layer2[0].conv1.stride == (1, 1)
